package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/policy/v1alpha1"
)

// progressPrinter prints what `deputy sync --wait` sees, changes only: one
// line per resource whenever its result, health or hook phase changes (the
// engine reports a resource again when its health or hook phase changes),
// a line when a failed attempt waits for its retry (its message says
// "retrying ... at T") and one when the retry starts.
type progressPrinter struct {
	out io.Writer
	// last is the line printed last for each resource of this attempt.
	last map[string]string
	// waiting is the retry waiting state printed last; retry is the retry
	// whose start was printed.
	waiting string
	retry   int64
}

func newProgressPrinter(out io.Writer) *progressPrinter {
	return &progressPrinter{out: out, last: map[string]string{}}
}

// event prints ev if it changes what was printed.
func (p *progressPrinter) event(ev v1alpha1.OperationEvent) {
	switch {
	case ev.Type == v1alpha1.OperationEventResource && ev.Resource != nil:
		r := ev.Resource
		id := r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
		line := resourceLine(r)
		if p.last[id] == line {
			return
		}
		p.last[id] = line
		fmt.Fprintln(p.out, line)
	case ev.Type == v1alpha1.OperationEventState && ev.State != nil:
		st := ev.State
		switch {
		case st.NextRetryAt != nil:
			if st.Message != p.waiting {
				p.waiting = st.Message
				fmt.Fprintln(p.out, strings.TrimRight(st.Message, "\n"))
			}
		case st.Phase == v1alpha1.OperationRunning && st.RetryCount > p.retry:
			// A new attempt: its resources are printed again.
			p.retry, p.last = st.RetryCount, map[string]string{}
			fmt.Fprintf(p.out, "retry %d running\n", st.RetryCount)
		}
	}
}

// resourceLine is one resource's progress. A result that names its sync
// phase: "wave 1  apps/Deployment guestbook/web  Synced  Progressing:
// MESSAGE" (the phase before the wave when it is not Sync; a hook's phase
// instead of the health: "PreSync wave 0  batch/Job guestbook/migrate
// Synced  hook Running"), then the result's message, if any. Otherwise
// "Deployment guestbook/web  Synced" and the message.
func resourceLine(r *v1alpha1.ResourceResult) string {
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + r.Name
	}
	if r.SyncPhase == "" {
		line := r.Kind + " " + name + "  " + r.Status
		if r.Message != "" {
			line += "  " + r.Message
		}
		return line
	}
	kind := r.Kind
	if r.Group != "" {
		kind = r.Group + "/" + r.Kind
	}
	wave := "wave " + strconv.FormatInt(r.SyncWave, 10)
	if r.SyncPhase != v1alpha1.SyncPhaseSync {
		wave = r.SyncPhase + " " + wave
	}
	parts := []string{wave, kind + " " + name, r.Status}
	switch {
	case r.HookPhase != "":
		parts = append(parts, "hook "+r.HookPhase)
	case r.Health != nil && r.Health.Status != "":
		h := r.Health.Status
		if r.Health.Message != "" {
			h += ": " + r.Health.Message
		}
		parts = append(parts, h)
	}
	if r.Message != "" {
		parts = append(parts, r.Message)
	}
	return strings.Join(parts, "  ")
}

// finalJSON is what -o json prints after --wait: the final operation state
// (its resources' results carry their health), and status.health of the
// Application as this operation left it, when deputy has it.
type finalJSON struct {
	*v1alpha1.OperationState
	ApplicationHealth *v1alpha1.HealthStatus `json:"applicationHealth,omitempty"`
}

// healthWait bounds how long `deputy sync -o json` waits for the
// Application's status to show the operation's end (cluster mode: the
// replica answering may see it a moment after the stream ended).
const healthWait = 3 * time.Second

// applicationHealth reads status.health of namespace/name once its
// status.operationState is final (the same end as final); nil when it has
// none, or cannot be read in time.
func applicationHealth(ctx context.Context, client *apiclient.Client, namespace, name string, final *v1alpha1.OperationState) *v1alpha1.HealthStatus {
	deadline := time.Now().Add(healthWait)
	for {
		app, err := client.Application(ctx, namespace, name)
		if err != nil {
			return nil
		}
		st := app.Status.OperationState
		if st != nil && st.Phase == final.Phase && st.FinishedAt != nil && final.FinishedAt != nil && st.FinishedAt.Equal(final.FinishedAt) {
			if app.Status.Health.Status == "" {
				return nil
			}
			return &app.Status.Health
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
