// Package health judges Kubernetes objects the way a GitOps engine must
// before it moves on: the health of a live object in Argo CD's vocabulary
// (Healthy, Suspended, Progressing, Missing, Degraded, Unknown), computed by
// kstatus (github.com/fluxcd/cli-utils/pkg/kstatus/status) with Argo CD's
// additions (a paused Deployment, a suspended CronJob or Job is Suspended);
// the progress of a hook (a Job or Pod runs until it completes, any other
// kind until it is healthy); Argo CD's ranking of health codes for an
// Application's health (Worse, Aggregate); and which kinds carry no status
// at all (Statusless), so that the engine need not read them.
//
// It reads nothing from a cluster: callers hand it the live objects they
// read as the sync identity. It must not import the engine (package
// syncer) or know about HTTP.
package health
