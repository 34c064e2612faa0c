// A dynamic hostPath provisioner for the single-node test cluster (see ../../README.md), built on
// sigs.k8s.io/sig-storage-lib-external-provisioner. For every claim of a StorageClass whose
// provisioner is sandpit.dev/host-path it makes a directory under -base-dir and a hostPath
// PersistentVolume pinned to the node; when such a volume is released (reclaimPolicy Delete) it
// removes the directory.
//
// It replaces kube-controller-manager's built-in hostPath provisioner, which makes its
// directories root:root 0750: hostPath volumes ignore fsGroup, so a non-root pod (the sandbox
// pods run as uid 1000 under the restricted Pod Security profile) could not write to its claim.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

const provisionerName = "sandpit.dev/host-path"

type hostPathProvisioner struct {
	baseDir string // absolute; every volume is one directory right under it
	node    string // the cluster's only node, which every volume is pinned to
}

// Provision makes the claim's directory and returns its PersistentVolume; the library fills in
// the claim reference, the class name and the provisioned-by annotation, then creates it.
func (p *hostPathProvisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claims with a selector are not supported")
	}
	node := opts.SelectedNodeName // set only for volumeBindingMode WaitForFirstConsumer
	if node == "" {
		node = p.node
	}
	dir := filepath.Join(p.baseDir, opts.PVName)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	// World-writable, as kind's local-path-provisioner makes its volumes: a hostPath volume is
	// mounted as it is on the host (the kubelet applies neither fsGroup nor any ownership
	// change to it), and the provisioner cannot know which uid the pods will run as, so 0777 is
	// what lets any non-root pod write. Chmod because MkdirAll's mode is masked by the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	hostPathType := v1.HostPathDirectory
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			// Not enforced: a hostPath directory has no size of its own.
			Capacity:   v1.ResourceList{v1.ResourceStorage: opts.PVC.Spec.Resources.Requests[v1.ResourceStorage]},
			VolumeMode: opts.PVC.Spec.VolumeMode,
			PersistentVolumeSource: v1.PersistentVolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: dir, Type: &hostPathType},
			},
			// The data lives on this node only, so pods using it must be scheduled here.
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{
					Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node},
				}},
			}}}},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete removes a released volume's directory. The library calls it only for volumes this
// provisioner made (by their provisioned-by annotation) whose reclaim policy is Delete.
func (p *hostPathProvisioner) Delete(_ context.Context, pv *v1.PersistentVolume) error {
	if pv.Spec.HostPath == nil {
		return &controller.IgnoredError{Reason: "not a hostPath volume"}
	}
	dir := filepath.Clean(pv.Spec.HostPath.Path)
	// Never remove anything but a directory right under the base directory.
	if filepath.Dir(dir) != p.baseDir || !strings.HasPrefix(filepath.Base(dir), "pvc-") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("%s is not a volume under %s", dir, p.baseDir)}
	}
	return os.RemoveAll(dir)
}

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "path of the kubeconfig to reach the API server with (required)")
	baseDir := flag.String("base-dir", "", "directory holding one subdirectory per volume (required)")
	node := flag.String("node", "", "name of the node every volume is pinned to (required)")
	flag.Parse()
	if *kubeconfig == "" || *baseDir == "" || *node == "" {
		klog.Exit("-kubeconfig, -base-dir and -node are required")
	}
	base, err := filepath.Abs(*baseDir)
	if err != nil {
		klog.Exit(err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		klog.Exit(err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Exit(err)
	}
	// client-go's default of 5 requests/s would make a burst of a few hundred claims (the
	// operator benchmark creates 200 sandboxes at once) wait minutes for their volumes.
	config.QPS = 200
	config.Burst = 400
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Exit(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	klog.InfoS("starting", "provisioner", provisionerName, "baseDir", base, "node", *node)
	// One instance per cluster, so no leader election (it would need a Lease and its RBAC).
	controller.NewProvisionController(ctx, client, provisionerName,
		&hostPathProvisioner{baseDir: base, node: *node},
		controller.LeaderElection(false),
		controller.Threadiness(16),
	).Run(ctx) // returns when ctx is cancelled
}
