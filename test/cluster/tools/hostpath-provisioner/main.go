// A dynamic hostPath provisioner for the single-node test cluster (see ../../README.md), built on
// sigs.k8s.io/sig-storage-lib-external-provisioner. For every claim of a StorageClass whose
// provisioner is sandpit.dev/host-path it makes a filesystem of the claim's size and a hostPath
// PersistentVolume pinned to the node; when such a volume is released (reclaimPolicy Delete) it
// removes it.
//
// The size is enforced: each volume is an ext4 filesystem of its own in a sparse file,
// <base-dir>/pvc-<uid>.img, mounted through a loop device at <base-dir>/pvc-<uid>. A write past
// it fails with ENOSPC inside the pod, and the node's disk holds at most the claim's size for it.
// Quotas on one shared filesystem would not do here: this kernel has neither XFS quotas
// (CONFIG_XFS_QUOTA) nor the quota format ext4's project quotas need (CONFIG_QFMT_V2), and
// btrfs qgroups limit a subvolume but not the subvolumes an unprivileged process creates inside
// it. Volumes made before, plain directories with no .img beside them, keep working unbounded.
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
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
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
	// Loop devices are set up one at a time: mount(8) finds a free device, then claims it, and
	// two mounts at once can pick the same one.
	mountMu sync.Mutex
}

// minBytes is the smallest volume made: ext4 needs a few blocks for itself.
const minBytes = 4 << 20

// run runs a command, returning its output in the error when it fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// isMountPoint says whether dir is the root of a mounted filesystem (its device differs from
// its parent's).
func isMountPoint(dir string) (bool, error) {
	var self, parent syscall.Stat_t
	if err := syscall.Lstat(dir, &self); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return self.Dev != parent.Dev, nil
}

// mountImage mounts an ext4 image at dir, which must exist. nosuid and nodev carry over to the
// bind mount the pod gets; discard gives the blocks of deleted files back to the node's disk
// (the loop device punches holes in the image).
func (p *hostPathProvisioner) mountImage(img, dir string) error {
	p.mountMu.Lock()
	defer p.mountMu.Unlock()
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	return run("mount", "-t", "ext4", "-o", "loop,discard,nosuid,nodev", img, dir)
}

// makeVolume makes the ext4 filesystem of a claim and mounts it at dir, world-writable. The
// image is written as <dir>.img.new and renamed only once mounted, so -mount-only (which mounts
// every .img) never mounts a volume still being made.
func (p *hostPathProvisioner) makeVolume(dir string, bytes int64) (err error) {
	img := dir + ".img"
	if mounted, err := isMountPoint(dir); err == nil && mounted {
		if _, err := os.Stat(img); err == nil {
			return nil // made by an earlier attempt whose answer was lost
		}
		if err := run("umount", dir); err != nil { // an attempt cut short: start again
			return err
		}
	}
	tmp := img + ".new"
	defer func() {
		if err != nil {
			if mounted, _ := isMountPoint(dir); mounted {
				_ = run("umount", dir)
			}
			_ = os.Remove(tmp)
			_ = os.Remove(dir) // only if empty: never a volume's data
		}
	}()
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(bytes) // sparse: the node's disk holds only what is written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// -m 0: no blocks reserved for root, the pod's uid gets the whole size.
	if err := run("mkfs.ext4", "-q", "-F", "-m", "0", tmp); err != nil {
		return err
	}
	// The mount point itself is mode 0000: should the filesystem ever not be mounted there, a
	// pod using the volume gets EACCES instead of writing to the node's disk.
	if err := os.MkdirAll(dir, 0o000); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o000); err != nil {
		return err
	}
	if err := p.mountImage(tmp, dir); err != nil {
		return err
	}
	// World-writable, as kind's local-path-provisioner makes its volumes (see Provision).
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	return os.Rename(tmp, img)
}

// mountAll mounts every volume's image that is not mounted: after the node restarted, or
// test/cluster/down unmounted everything under the cluster's state directory.
func (p *hostPathProvisioner) mountAll() error {
	imgs, err := filepath.Glob(filepath.Join(p.baseDir, "pvc-*.img"))
	if err != nil {
		return err
	}
	var errs []error
	for _, img := range imgs {
		dir := strings.TrimSuffix(img, ".img")
		if err := os.MkdirAll(dir, 0o000); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.mountImage(img, dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Provision makes the claim's volume (a filesystem of its size) and returns its
// PersistentVolume; the library fills in the claim reference, the class name and the
// provisioned-by annotation, then creates it.
func (p *hostPathProvisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claims with a selector are not supported")
	}
	node := opts.SelectedNodeName // set only for volumeBindingMode WaitForFirstConsumer
	if node == "" {
		node = p.node
	}
	size := opts.PVC.Spec.Resources.Requests[v1.ResourceStorage]
	bytes := size.Value() // rounded up to whole bytes
	if bytes < minBytes {
		return nil, controller.ProvisioningFinished, fmt.Errorf("the claim requests %s; volumes are at least %d bytes", size.String(), minBytes)
	}
	dir := filepath.Join(p.baseDir, opts.PVName)
	// World-writable, as kind's local-path-provisioner makes its volumes: a hostPath volume is
	// mounted as it is on the host (the kubelet applies neither fsGroup nor any ownership
	// change to it), and the provisioner cannot know which uid the pods will run as, so 0777 is
	// what lets any non-root pod write.
	if err := p.makeVolume(dir, bytes); err != nil {
		return nil, controller.ProvisioningInBackground, err
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
			// Enforced: the volume is a filesystem of this size.
			Capacity:   v1.ResourceList{v1.ResourceStorage: size},
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

// Delete removes a released volume: unmounts its filesystem and removes its image and mount
// point (or, for a volume made before sizes were enforced, its directory). The library calls it
// only for volumes this provisioner made (by their provisioned-by annotation) whose reclaim
// policy is Delete.
func (p *hostPathProvisioner) Delete(_ context.Context, pv *v1.PersistentVolume) error {
	if pv.Spec.HostPath == nil {
		return &controller.IgnoredError{Reason: "not a hostPath volume"}
	}
	dir := filepath.Clean(pv.Spec.HostPath.Path)
	// Never remove anything but a directory right under the base directory.
	if filepath.Dir(dir) != p.baseDir || !strings.HasPrefix(filepath.Base(dir), "pvc-") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("%s is not a volume under %s", dir, p.baseDir)}
	}
	if mounted, err := isMountPoint(dir); err == nil && mounted {
		// The loop device goes with the last unmount (mount -o loop sets it to autoclear).
		if err := run("umount", dir); err != nil {
			return err // still in use: the library retries
		}
	}
	if err := os.Remove(dir + ".img"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(dir)
}

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "path of the kubeconfig to reach the API server with (required)")
	baseDir := flag.String("base-dir", "", "directory holding one subdirectory per volume (required)")
	node := flag.String("node", "", "name of the node every volume is pinned to (required)")
	mountOnly := flag.Bool("mount-only", false, "mount every volume under -base-dir that is not mounted, then exit")
	flag.Parse()
	if *baseDir == "" || (!*mountOnly && (*kubeconfig == "" || *node == "")) {
		klog.Exit("-kubeconfig, -base-dir and -node are required")
	}
	base, err := filepath.Abs(*baseDir)
	if err != nil {
		klog.Exit(err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		klog.Exit(err)
	}
	if *mountOnly {
		// test/cluster/up runs this before the kubelet starts, so no pod ever finds its
		// volume's mount point empty.
		if err := (&hostPathProvisioner{baseDir: base}).mountAll(); err != nil {
			klog.Exit(err)
		}
		return
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
