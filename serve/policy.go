package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/webhook"
)

// startPolicySource loads the policy files (policy.paths; the embedded
// example policy when there are none, embedded true) and watches them until
// ctx ends. A failed first load is logged, not returned: deputy serves with
// /readyz red (policyReady) until a policy loads.
func startPolicySource(ctx context.Context, p config.Policy, log *slog.Logger, m *webhook.Metrics) (source *policy.FileSource, embedded bool) {
	source, embedded = newPolicySource(p, log, m)
	if err := source.Load(); err != nil {
		log.Error("initial policy load failed; serving with /readyz red until it loads", "error", err.Error())
	}
	go func() {
		if err := source.Run(ctx); err != nil {
			log.Error("policy watcher stopped; changes will not be picked up", "error", err.Error())
		}
	}()
	return source, embedded
}

func newPolicySource(p config.Policy, log *slog.Logger, m *webhook.Metrics) (*policy.FileSource, bool) {
	opts := policy.FileSourceOptions{
		PollInterval: p.PollInterval.Duration,
		Logger:       log,
		OnLoad: func(st policy.Status) {
			m.PolicyLoad(st.LastError == nil, st.Ready(), st.LastSuccess)
		},
	}
	if len(p.Paths) == 0 {
		opts.FS = examples.FS
		return policy.NewFileSource([]string{"."}, opts), true
	}
	return policy.NewFileSource(p.Paths, opts), false
}

// policyReady is the readiness check of a policy source: red before the first
// load and while the last reload failed, with the error (file, document).
func policyReady(s *policy.FileSource) func() error {
	return func() error {
		st := s.Status()
		switch {
		case !st.Loaded && st.LastError != nil:
			return fmt.Errorf("no policy loaded: %w", st.LastError)
		case !st.Loaded:
			return errors.New("no policy loaded yet")
		case st.LastError != nil:
			return fmt.Errorf("last reload failed at %s, serving the policy loaded at %s: %w",
				st.LastAttempt.UTC().Format("2006-01-02T15:04:05Z"), st.LastSuccess.UTC().Format("2006-01-02T15:04:05Z"), st.LastError)
		}
		return nil
	}
}

// policyLoaded is the readiness of deputy's API: it answers only once a
// policy has loaded.
func policyLoaded(s *policy.FileSource) func() error {
	return func() error {
		if s.Current() == nil {
			return errors.New("deputy has not loaded its policy yet")
		}
		return nil
	}
}
