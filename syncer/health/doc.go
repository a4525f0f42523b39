// Package health judges Kubernetes objects the way a GitOps engine must
// before it moves on: the health of a live object in Argo CD's vocabulary
// (Healthy, Suspended, Progressing, Missing, Degraded, Unknown), computed by
// kstatus (github.com/fluxcd/cli-utils/pkg/kstatus/status) except for the
// kinds whose health Argo CD judges differently, where deputy follows Argo
// CD (gitops-engine pkg/health: a paused Deployment is Suspended, a Job is
// Progressing until it completes, a Pod by its restart policy, ...); the
// progress of a hook (a Job or Pod runs until it completes, any other kind
// until it is healthy); Argo CD's ranking of health codes for an
// Application's health (Worse, Aggregate); and which kinds carry no status
// at all (Statusless), so that the engine need not read them.
//
// testdata/*.yaml are the cases of kstatus' and Argo CD's own tests, as
// data, each with what kstatus and Argo CD answer and, where deputy answers
// otherwise, why.
//
// It also follows one object until it is done (Follow): a watch by name
// through a dynamic client the caller hands it, acting as the sync
// identity, so that waiting costs one watch event, not a poll interval. It
// must not import the engine (package syncer) or decide whom to act as.
package health
