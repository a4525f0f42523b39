package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/policy/v1alpha1"
)

// Exit codes of `deputy diff`, as diff(1) and kubectl diff have them.
const (
	diffExitChanges = 1
	diffExitError   = 2
)

type diffFlags struct {
	revisions []string
	output    string
	local     string
	clientFlags
}

func newDiffCommand() *cobra.Command {
	var f diffFlags
	cmd := &cobra.Command{
		Use:   "diff NAMESPACE/NAME [--revision R]... [--local DIR] [-o json] [--server URL] [--token-file F | --client-cert F --client-key F] [--cacert F]",
		Short: "Show what a sync of an Application would change, as a unified diff per object",
		Long: `Ask a running deputy what a sync of the Application NAMESPACE/NAME would
change, like kubectl diff: deputy renders the target (at the
targetRevision, or --revision), asks the destination for a server-side
dry-run apply of every object as the ServiceAccount the AppProject derives,
and compares the answer with the live object. Nothing changes in the
cluster.

For every object a sync would change, a header line
  ===== GROUP/Kind NAMESPACE/NAME (ACTION)
(the version for the core group: v1/ConfigMap), then the unified diff from
the live object to what the sync would leave. An object to create is a diff
from nothing; an object to prune (tracked by this Application, no longer in
Git: a sync with --prune deletes it) has its header only. Unchanged objects
are not shown; the last line counts every action. A Secret's values are
never shown, only which keys change. Hooks are not included. deputy's
warnings (what it could not look at, e.g. a kind the ServiceAccount may not
list: objects to prune there are unknown) go to stderr.

Exit code 0 means a sync would change nothing, 1 that it would change
something, 2 an error: deputy refused or could not compute the diff, or some
object could not be compared (its header says why; the diff is
incomplete). With -o json, the ApplicationDiff deputy answered, with the
same exit codes.

With --local DIR, the manifests of DIR are diffed instead of what the
Application's sources render (like argocd app diff --local): every .yaml,
.yml and .json file below DIR (hidden ones skipped; multi-document; Lists
expanded), or kustomize build of DIR when it holds a kustomization (in this
process: only files inside DIR, no remote bases, no plugins, no Helm). A
chart is refused: run helm template and point --local at its output. At
most 8 MiB of files and 10,000 objects. Everything else is a diff's: the
AppProject checks every object, the same ServiceAccount dry-runs them, and
tracked objects missing from DIR are listed as prune. Not with --revision.

` + credentialsHelp + ` The caller needs, in deputy's policy, verb
get on applications/diff (group deputy.dev) in the namespace; --local needs
verb create on applications/diff instead, a stronger grant: whoever may
send manifests may see, in the diff, any object the Application's
ServiceAccount can read, by naming it in a manifest.`,
		Example: `  deputy diff guestbook/guestbook
  deputy diff guestbook/guestbook --revision v1.2.0
  deputy diff guestbook/guestbook --local ./guestbook   # the working copy, before a commit
  deputy diff guestbook/multi --revision main --revision ""   # spec.sources: one per source, "" keeps its targetRevision
  DEPUTY_TOKEN=... deputy diff guestbook/guestbook --server https://deputy.example:8443 --cacert ca.crt -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return exitError{code: diffExitError, err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := runDiff(cmd, args[0], &f); err != nil {
				if _, ok := err.(exitError); ok {
					return err
				}
				return exitError{code: diffExitError, err: err}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: diffExitError, err: err} })
	fs := cmd.Flags()
	fs.StringArrayVar(&f.revisions, "revision", nil, `render this branch, tag or commit instead of the targetRevision; for an Application with spec.sources, once per source in order ("" keeps that source's targetRevision)`)
	fs.StringVar(&f.local, "local", "", "diff the manifests of this directory (plain files or a kustomization) instead of what the sources render; needs create on applications/diff")
	fs.StringVarP(&f.output, "output", "o", "", `"json": print the ApplicationDiff as JSON`)
	f.clientFlags.register(fs)
	return cmd
}

// diffOperation is the operation of the --revision flags: one is revision
// (spec.source), several are revisions (spec.sources, one per source).
func diffOperation(revisions []string) v1alpha1.SyncOperation {
	if len(revisions) == 1 {
		return v1alpha1.SyncOperation{Revision: revisions[0]}
	}
	return v1alpha1.SyncOperation{Revisions: revisions}
}

func runDiff(cmd *cobra.Command, ref string, f *diffFlags) error {
	ns, name, err := parseAppRef(ref)
	if err != nil {
		return err
	}
	if f.output != "" && f.output != "json" {
		return fmt.Errorf("--output %q: the only format is json", f.output)
	}
	var objects []map[string]any
	if f.local != "" {
		if len(f.revisions) > 0 {
			return errors.New("--local and --revision do not go together: --local diffs the manifests of a directory, not a revision")
		}
		if objects, err = readLocal(f.local, func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", w) }); err != nil {
			return err
		}
	}
	client, opts, err := newClient(cmd, &f.clientFlags)
	if err != nil {
		return err
	}
	var d *v1alpha1.ApplicationDiff
	if objects != nil {
		if d, err = client.DiffLocal(cmd.Context(), ns, name, objects); err != nil {
			return explainAPIError(err, opts, localDiffCall)
		}
	} else if d, err = client.Diff(cmd.Context(), ns, name, diffOperation(f.revisions)); err != nil {
		return explainRevisions(explainAPIError(err, opts, diffCall))
	}
	for _, w := range d.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", w)
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		if err := printJSON(out, d); err != nil {
			return err
		}
	} else {
		printDiff(out, d)
	}
	return diffExit(d)
}

// explainRevisions says how to give --revision when deputy refused the
// revisions for the Application's sources (its message speaks of the API's
// revision and revisions).
func explainRevisions(err error) error {
	var apiErr *apiclient.StatusError
	if !errors.As(err, &apiErr) || apiErr.Status.Code != http.StatusUnprocessableEntity {
		return err
	}
	switch msg := apiErr.Status.Message; {
	case strings.HasPrefix(msg, "revisions is for an Application with spec.sources"):
		return fmt.Errorf("%w\n(this Application has spec.source: give --revision once)", err)
	case strings.Contains(msg, "(spec.sources): send"):
		return fmt.Errorf("%w\n(give --revision once per source, in order; --revision \"\" keeps that source's targetRevision)", err)
	}
	return err
}

// diffExit is the command's outcome for d: exit 2 when some resource could
// not be compared, 1 when a sync would change something, else nil (0).
func diffExit(d *v1alpha1.ApplicationDiff) error {
	for _, r := range d.Resources {
		if r.Action == v1alpha1.DiffActionError {
			return exitError{code: diffExitError}
		}
	}
	if d.Changed() {
		return exitError{code: diffExitChanges}
	}
	return nil
}

// printDiff prints a header and the unified diff of every resource a sync
// would change or that could not be compared, then the counts.
func printDiff(out io.Writer, d *v1alpha1.ApplicationDiff) {
	counts := map[string]int{}
	for _, r := range d.Resources {
		counts[r.Action]++
		if r.Action == v1alpha1.DiffActionUnchanged {
			continue
		}
		fmt.Fprintf(out, "===== %s (%s)\n", diffResourceName(r), diffHeaderAction(r))
		if r.Diff != "" {
			fmt.Fprint(out, r.Diff)
			if !strings.HasSuffix(r.Diff, "\n") {
				fmt.Fprintln(out)
			}
		}
	}
	summary := fmt.Sprintf("%d to update, %d to create, %d to prune, %d unchanged",
		counts[v1alpha1.DiffActionUpdate], counts[v1alpha1.DiffActionCreate], counts[v1alpha1.DiffActionPrune], counts[v1alpha1.DiffActionUnchanged])
	if n := counts[v1alpha1.DiffActionError]; n > 0 {
		summary += fmt.Sprintf(", %d could not be compared", n)
	}
	var at []string
	switch len(d.Revisions) {
	case 0:
	case 1:
		at = append(at, "revision "+d.Revisions[0])
	default:
		at = append(at, "revisions "+strings.Join(d.Revisions, " "))
	}
	if d.Identity != "" {
		at = append(at, "as "+d.Identity)
	}
	if len(at) > 0 {
		summary += " (" + strings.Join(at, ", ") + ")"
	}
	fmt.Fprintln(out, summary)
}

// diffResourceName is "apps/Deployment guestbook/web": the group, or the
// version for the core group, the kind, the namespace and the name.
func diffResourceName(r v1alpha1.ResourceDiff) string {
	gk := r.Kind
	if g := r.Group; g != "" {
		gk = g + "/" + r.Kind
	} else if r.Version != "" {
		gk = r.Version + "/" + r.Kind
	}
	if r.Namespace != "" {
		return gk + " " + r.Namespace + "/" + r.Name
	}
	return gk + " " + r.Name
}

// diffHeaderAction is the header's parenthesis: the action, and what prune
// means or the resource's message.
func diffHeaderAction(r v1alpha1.ResourceDiff) string {
	s := r.Action
	if r.Action == v1alpha1.DiffActionPrune {
		return s + ": tracked by this Application, no longer in Git"
	}
	if msg := strings.TrimSpace(r.Message); msg != "" {
		s += ": " + strings.ReplaceAll(msg, "\n", " ")
	}
	return s
}
