// Command deputy answers kube-apiserver's SubjectAccessReview, TokenReview and
// AdmissionReview webhooks and syncs GitOps applications as per-project
// ServiceAccounts. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"deputy.dev/deputy/syncer/source"
)

func main() {
	// deputy starts itself again as a render worker for every render
	// (syncer/source/render_worker.go): before anything else.
	if source.IsRenderWorker() {
		os.Exit(source.RenderWorkerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(execute(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
