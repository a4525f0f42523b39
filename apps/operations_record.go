package apps

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strings"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// What an operation leaves outside the queue: its audit line, and its
// states through the StatusWriter.

// auditLine writes the one audit line of an operation. It names who asked,
// the Application, the revision, the identity the cluster saw, the outcome;
// it carries no credentials (Operations never sees any).
func (o *Operations) auditLine(req syncer.Request, final *v1alpha1.OperationState) {
	user := req.InitiatedBy.Username
	if user == "" && req.InitiatedBy.Automated {
		user = "automated"
	}
	revision := cmp.Or(req.Sync.Revision, strings.Join(req.Sync.Revisions, ","))
	if revs := final.SyncResult.RevisionList(); len(revs) > 0 {
		revision = strings.Join(revs, ",")
	} else if revision == "" {
		var targets []string
		for _, src := range req.Application.Spec.GetSources() {
			targets = append(targets, src.TargetRevision)
		}
		revision = strings.Join(targets, ",")
	}
	o.log.LogAttrs(context.Background(), slog.LevelInfo, AuditMessage,
		slog.String("user", user),
		slog.String("application", appKey(req.Application.Namespace, req.Application.Name)),
		slog.String("revision", revision),
		slog.String("identity", final.Identity),
		slog.String("phase", final.Phase),
		slog.String("message", final.Message),
		slog.Int64("retryCount", final.RetryCount),
		slog.Bool("dryRun", req.Sync.DryRun),
		slog.Bool("prune", req.Sync.Prune),
	)
}

func (o *Operations) writeStatus(key string, state *v1alpha1.OperationState) {
	if o.writer == nil {
		return
	}
	ns, name, _ := strings.Cut(key, "/")
	ctx, cancel := context.WithTimeout(context.Background(), statusWriteTimeout)
	defer cancel()
	if err := o.writer.WriteOperationState(ctx, ns, name, state.DeepCopy()); err != nil {
		if errors.Is(err, errTermEnding) || errors.Is(err, errReplaced) {
			o.log.Info("operation state not recorded", "application", key, "phase", state.Phase, "reason", err.Error())
			return
		}
		o.log.Error("failed to record the operation state", "application", key, "phase", state.Phase, "error", err.Error())
	}
}
