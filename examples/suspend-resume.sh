#!/usr/bin/env bash
# Suspend a sandbox (its pod stops, its volume stays), then resume it on the same volume.
set -euo pipefail
name=${1:-hello}
kubectl patch sandbox "$name" --type=merge -p '{"spec":{"lifecycle":{"suspended":true}}}'
kubectl wait sandbox "$name" --for=jsonpath='{.status.phase}'=Suspended --timeout=60s
kubectl patch sandbox "$name" --type=merge -p '{"spec":{"lifecycle":{"suspended":false}}}'
kubectl wait sandbox "$name" --for=jsonpath='{.status.phase}'=Ready --timeout=120s
