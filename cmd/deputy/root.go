package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code (can-i answers "no" with 1; diff
// fails with 2) and, if err is set, the error execute prints.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e exitError) Unwrap() error { return e.err }

// execute runs the command line args and returns the process exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(runServe)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(stderr, "error:", ee.err)
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// newRootCommand assembles the command tree; serve's run function is a
// parameter so flag and config precedence can be tested without serving.
func newRootCommand(serve serveFunc) *cobra.Command {
	root := &cobra.Command{
		Use:           "deputy",
		Short:         "Authorization, token and admission webhooks for kube-apiserver, and impersonated GitOps syncs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newServeCommand(serve),
		newCertsCommand(),
		newConfigCommand(),
		newCanICommand(),
		newReplayCommand(),
		newWhoCanCommand(),
		newValidateCommand(),
		newSyncCommand(),
		newDiffCommand(),
		newRenderCommand(),
		newTokenCommand(),
		newVersionCommand(),
	)
	return root
}
