// Command syncbench runs one sync with deputy's engine (syncer.Engine) in
// its own process and prints one JSON line: the phase, the number of
// resources, the seconds Run took, and the process's peak resident memory
// (VmHWM), so that the engine can be compared with `kubectl apply
// --server-side` run on the same files as the same ServiceAccount. Usage:
//
//	syncbench -server https://127.0.0.1:6443 -ca ca.crt -token-file controller.token \
//	  -project project.json -repo /path/to/git/repo -path cms -namespace bench-1 [-parallelism 8] [-cpuprofile f.pprof]
//
// The token is the controller identity's; the project (JSON, an
// AppProject) derives the ServiceAccount to impersonate.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/source"

	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/test/load/internal/peakrss"
)

// Result is what syncbench prints.
type Result struct {
	Phase     string  `json:"phase"`
	Message   string  `json:"message"`
	Identity  string  `json:"identity"`
	Resources int     `json:"resources"`
	Failed    int     `json:"failed"`
	Seconds   float64 `json:"seconds"`
	// BeforeApplySeconds is the time until the first resource result:
	// fetch, render, discovery, project checks and the preflight.
	BeforeApplySeconds float64 `json:"before_apply_seconds"`
	VmHWMKiB           int64   `json:"vmhwm_kib"`
}

func main() {
	// The engine renders in render workers: this binary started again.
	if source.IsRenderWorker() {
		os.Exit(source.RenderWorkerMain())
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "syncbench:", err)
		os.Exit(1)
	}
}

func run() error {
	server := flag.String("server", "", "kube-apiserver URL")
	caFile := flag.String("ca", "", "kube-apiserver CA certificate file")
	tokenFile := flag.String("token-file", "", "the controller identity's bearer token")
	projectFile := flag.String("project", "", "AppProject as JSON")
	repo := flag.String("repo", "", "Git repository (local path)")
	path := flag.String("path", ".", "path in the repository")
	namespace := flag.String("namespace", "", "destination namespace")
	parallelism := flag.Int("parallelism", syncer.DefaultParallelism, "engine parallelism")
	cacheDir := flag.String("cache", "", "cache directory (default: a temporary one)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (pprof) to this file")
	flag.Parse()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(*projectFile)
	if err != nil {
		return err
	}
	var project v1alpha1.AppProject
	if err := json.Unmarshal(raw, &project); err != nil {
		return fmt.Errorf("%s: %w", *projectFile, err)
	}
	if *cacheDir == "" {
		if *cacheDir, err = os.MkdirTemp("", "syncbench-"); err != nil {
			return err
		}
		defer os.RemoveAll(*cacheDir)
	}
	cfg := &rest.Config{Host: *server, BearerToken: strings.TrimSpace(string(token)), TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	var local []string
	if filepath.IsAbs(*repo) {
		// A local repository: allow its parent directory, as an operator
		// would with sync.localRepositories.
		local = []string{filepath.Dir(*repo)}
	}
	engine, err := syncer.NewEngine(syncer.EngineOptions{
		Clusters:      cluster.NewRegistry(cluster.InCluster(cfg)),
		Impersonation: syncer.ImpersonationSettings{Enabled: true, Enforced: true},
		Source:        source.Options{CacheDir: *cacheDir, LocalRepositories: local},
		Parallelism:   *parallelism,
	})
	if err != nil {
		return err
	}
	app := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "syncbench-" + *namespace}, Spec: v1alpha1.ApplicationSpec{
		Project:     project.Name,
		Source:      v1alpha1.ApplicationSource{RepoURL: *repo, Path: *path},
		Destination: v1alpha1.ApplicationDestination{Server: syncer.InClusterServer, Namespace: *namespace},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var first time.Time
	var once sync.Once
	st := engine.Run(ctx, syncer.Request{Application: app, Project: &project}, func(_ *v1alpha1.OperationState, r *v1alpha1.ResourceResult) {
		if r != nil {
			once.Do(func() { first = time.Now() })
		}
	})
	res := Result{Phase: st.Phase, Identity: st.Identity, Seconds: time.Since(start).Seconds(), VmHWMKiB: peakrss.KiB()}
	if !first.IsZero() {
		res.BeforeApplySeconds = first.Sub(start).Seconds()
	}
	res.Message, _, _ = strings.Cut(st.Message, "\n")
	if st.SyncResult != nil {
		res.Resources = len(st.SyncResult.Resources)
		for _, r := range st.SyncResult.Resources {
			if r.Status == v1alpha1.ResultCodeSyncFailed {
				res.Failed++
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
