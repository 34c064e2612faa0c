{{/* The release's base name: <release>-<chart>, or the release alone when it names the chart. */}}
{{- define "sandpit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "sandpit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: sandpit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Selector labels of a component ("operator" or "provisioner"). The name label is fixed: the
NetworkPolicy of every sandbox admits traffic from pods labelled sandpit-operator and
sandpit-provisioner in the operator's namespace.
*/}}
{{- define "sandpit.selectorLabels" -}}
app.kubernetes.io/name: sandpit-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "sandpit.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* The restricted Pod Security Standard, for the pod and for its container. */}}
{{- define "sandpit.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "sandpit.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The Secret holding the provisioner's API keys. */}}
{{- define "sandpit.apiKeysSecret" -}}
{{- .Values.provisioner.existingSecret | default (printf "%s-api-keys" (include "sandpit.fullname" .)) -}}
{{- end -}}

{{/* The Secret holding the key E2B envd access tokens are derived from. */}}
{{- define "sandpit.e2bSecret" -}}
{{- .Values.provisioner.e2b.existingSecret | default (printf "%s-e2b" (include "sandpit.fullname" .)) -}}
{{- end -}}

{{/*
The platform's resource bounds as the operator and provisioner read them (SANDPIT_MIN_* and
SANDPIT_MAX_*): one set of values, so the two always agree.
*/}}
{{- define "sandpit.boundsEnv" -}}
{{- $b := .Values.sandboxes.bounds }}
{{- range $side := list "min" "max" }}
{{- range $dim, $env := dict "cpu" "CPU" "memory" "MEMORY" "ephemeralStorage" "EPHEMERAL_STORAGE" "disk" "DISK" }}
{{- with index (index $b $side) $dim }}
- name: SANDPIT_{{ upper $side }}_{{ $env }}
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The base of the URLs the provisioner hands out: provisioner.publicUrl, else its Service's cluster
address. Never the request's Host header (a caller chooses that). An Ingress host with no
publicUrl is refused: the URL clients use is then only known to whoever installs the chart.
*/}}
{{- define "sandpit.provisionerUrl" -}}
{{- $p := .Values.provisioner -}}
{{- if $p.publicUrl -}}
{{- $p.publicUrl -}}
{{- else if and $p.ingress.enabled $p.ingress.host -}}
{{- fail "provisioner.ingress.host needs provisioner.publicUrl: the URL clients reach the provisioner at (for example https://<ingress.host>), which the URLs it hands out are built from" -}}
{{- else -}}
http://{{ include "sandpit.fullname" . }}-provisioner.{{ .Release.Namespace }}.svc{{ if ne (int $p.service.port) 80 }}:{{ $p.service.port }}{{ end }}
{{- end -}}
{{- end -}}
