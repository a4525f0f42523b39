// Command applyfloor is the server floor of the sync benchmark: the least a
// client can do to create an application's objects. It reads the YAML files
// of a directory (one ConfigMap each), and server-side applies them with a
// plain client-go loop at the engine's parallelism (syncer.DefaultParallelism
// goroutines): no Git, no render, no discovery, no preflight, no tracking
// annotation, no unchanged-object skip. It prints one JSON line: the number
// of objects, the seconds from its start to the last response, and its peak
// resident memory. Usage:
//
//	applyfloor -kubeconfig admin.kubeconfig -dir repo/cms -namespace bench-floor-1 [-parallelism 8] [-as USER]
//
// With the admin kubeconfig (group system:masters) kube-apiserver asks no
// webhook and impersonates nobody: the floor of what the server needs per
// object. -as impersonates USER (the benchmark uses the controller's
// kubeconfig and the project's ServiceAccount, as deputy does) to separate
// what impersonation and authorization cost the server from what the engine
// costs on top.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/syncer"

	"deputy.dev/deputy/test/load/internal/peakrss"
)

// Result is what applyfloor prints.
type Result struct {
	Objects  int     `json:"objects"`
	Failed   int     `json:"failed"`
	Seconds  float64 `json:"seconds"`
	VmHWMKiB int64   `json:"vmhwm_kib"`
	Error    string  `json:"error,omitempty"`
}

func main() {
	start := time.Now()
	if err := run(start); err != nil {
		fmt.Fprintln(os.Stderr, "applyfloor:", err)
		os.Exit(1)
	}
}

func run(start time.Time) error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (the benchmark's: the admin's)")
	dir := flag.String("dir", "", "directory of YAML files, one ConfigMap each")
	namespace := flag.String("namespace", "", "namespace to create them in")
	as := flag.String("as", "", "impersonate this user (default: nobody)")
	parallelism := flag.Int("parallelism", syncer.DefaultParallelism, "requests in flight (default: the engine's)")
	flag.Parse()
	if *kubeconfig == "" || *dir == "" || *namespace == "" || *parallelism < 1 {
		return fmt.Errorf("usage: applyfloor -kubeconfig FILE -dir DIR -namespace NS [-parallelism N] [-as USER]")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // no client-side rate limit, as the engine
	if *as != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: *as}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(*dir, "*.yaml"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next, failed atomic.Int64
	var firstErr atomic.Value
	force := true
	var wg sync.WaitGroup
	for range *parallelism {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(files) {
					return
				}
				if err := applyFile(ctx, cs, *namespace, files[i], &force); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	res := Result{Objects: len(files), Failed: int(failed.Load()), Seconds: time.Since(start).Seconds(), VmHWMKiB: peakrss.KiB()}
	if e, ok := firstErr.Load().(string); ok {
		res.Error = e
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// applyFile server-side applies one ConfigMap file (YAML turned into JSON).
func applyFile(ctx context.Context, cs *kubernetes.Clientset, namespace, file string, force *bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	body, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &meta); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	_, err = cs.CoreV1().ConfigMaps(namespace).Patch(ctx, meta.Metadata.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "applyfloor", Force: force})
	return err
}
