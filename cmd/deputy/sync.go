package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"deputy.dev/deputy/policy/v1alpha1"
)

type syncFlags struct {
	dryRun        bool
	prune         bool
	revision      string
	healthTimeout string
	wait          bool
	output        string
	clientFlags
}

func newSyncCommand() *cobra.Command {
	var f syncFlags
	cmd := &cobra.Command{
		Use:   "sync NAMESPACE/NAME [--dry-run] [--prune] [--revision R] [--health-timeout D] [--wait] [-o json] [--server URL] [--token-file F | --client-cert F --client-key F] [--cacert F]",
		Short: "Start a sync of an Application through deputy's API, and follow it",
		Long: `Ask a running deputy to sync the Application NAMESPACE/NAME, with deputy's
own engine, as the ServiceAccount the Application's AppProject derives.

With --wait, follow the operation: a line per resource whenever its result,
health or hook phase changes (wave, kind, name, result, health), the failed
attempts that spec.syncPolicy.retry retries ("...; retrying (attempt 2 of 4)
at TIME"), then the message of a sync that did not succeed (a health timeout
names the resources that were not healthy), the phase and the identity the
cluster saw. With -o json, the final operation state (each resource with its
health) and the Application's health (applicationHealth). Exit code 0 means
the sync succeeded, 1 anything else.

` + credentialsHelp + ` The caller needs, in deputy's policy, verb
create on applications/sync (group deputy.dev) in the namespace, and get on
applications to follow it.`,
		Example: `  deputy sync guestbook/guestbook --wait
  deputy sync guestbook/guestbook --dry-run --prune --wait
  deputy sync guestbook/guestbook --health-timeout 10m --wait
  DEPUTY_TOKEN=... deputy sync guestbook/guestbook --server https://deputy.example:8443 --cacert ca.crt --wait -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSync(cmd, args[0], &f)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "send every write with dryRun=All: nothing changes in the cluster")
	fs.BoolVar(&f.prune, "prune", false, "delete tracked objects that are no longer in Git")
	fs.StringVar(&f.revision, "revision", "", "sync this branch, tag or commit instead of the Application's targetRevision")
	fs.StringVar(&f.healthTimeout, "health-timeout", "", "how long this sync waits for one wave's resources to become healthy, e.g. 10m (default: the Application's spec.syncPolicy.healthTimeout, else deputy's sync.healthTimeout)")
	fs.BoolVar(&f.wait, "wait", false, "follow the operation and exit 0 only if it succeeded")
	fs.StringVarP(&f.output, "output", "o", "", `"json": print the operation state as JSON (the final one with --wait)`)
	f.clientFlags.register(fs)
	return cmd
}

func runSync(cmd *cobra.Command, ref string, f *syncFlags) error {
	ns, name, err := parseAppRef(ref)
	if err != nil {
		return err
	}
	if f.output != "" && f.output != "json" {
		return fmt.Errorf("--output %q: the only format is json", f.output)
	}
	op := v1alpha1.SyncOperation{Revision: f.revision, Prune: f.prune, DryRun: f.dryRun, HealthTimeout: f.healthTimeout}
	if _, err := v1alpha1.ParseHealthTimeout(f.healthTimeout, nil); err != nil {
		return fmt.Errorf("--health-timeout %q: %s", f.healthTimeout, err.Detail)
	}
	client, opts, err := newClient(cmd, &f.clientFlags)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	started, err := client.Sync(ctx, ns, name, op)
	if err != nil {
		return explainAPIError(err, opts, syncCall)
	}
	if !f.wait {
		if f.output == "json" {
			return printJSON(out, started)
		}
		fmt.Fprintf(out, "sync of %s/%s started (%s)\n", ns, name, started.Phase)
		return nil
	}
	progress := newProgressPrinter(out)
	final, err := client.Watch(ctx, ns, name, func(ev v1alpha1.OperationEvent) error {
		if f.output == "" {
			progress.event(ev)
		}
		return nil
	})
	if err != nil {
		return explainAPIError(err, opts, syncCall)
	}
	if f.output == "json" {
		if err := printJSON(out, finalJSON{OperationState: final, ApplicationHealth: applicationHealth(ctx, client, ns, name, final)}); err != nil {
			return err
		}
	} else {
		if final.Phase != v1alpha1.OperationSucceeded && final.Message != "" {
			fmt.Fprintln(out, strings.TrimRight(final.Message, "\n"))
		}
		fmt.Fprintln(out, finalLine(final))
		for _, line := range outOfSyncLines(final) {
			fmt.Fprintln(out, line)
		}
	}
	if final.Phase != v1alpha1.OperationSucceeded {
		return exitError{code: 1}
	}
	return nil
}

// finalLine is "Succeeded as system:serviceaccount:guestbook:guestbook-deployer".
func finalLine(s *v1alpha1.OperationState) string {
	line := s.Phase
	if s.Operation.Sync != nil && s.Operation.Sync.DryRun {
		line += " (dry run)"
	}
	if s.Identity != "" {
		line += " as " + s.Identity
	}
	return line
}

// outOfSyncLines say, after a sync that leaves the Application OutOfSync
// (v1alpha1.SyncStatusAfter), which objects it tracks but no longer renders
// are still there, and how to delete them.
func outOfSyncLines(final *v1alpha1.OperationState) []string {
	st, ok := v1alpha1.SyncStatusAfter(final)
	if !ok || st.Status != v1alpha1.SyncStatusCodeOutOfSync {
		return nil
	}
	left := v1alpha1.PruneSkipped(final)
	hint := "sync with --prune to delete them"
	if final.Operation.Sync != nil && final.Operation.Sync.Prune {
		hint = "each line says why prune left it"
	}
	what := fmt.Sprintf("%d resources are", len(left))
	if len(left) == 1 {
		what = "1 resource is"
	}
	lines := []string{fmt.Sprintf("OutOfSync: %s no longer in Git but still there (%s):", what, hint)}
	for _, r := range left {
		lines = append(lines, "  "+resourceLine(r))
	}
	return lines
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
