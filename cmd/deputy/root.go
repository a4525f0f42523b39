package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code (can-i answers "no" with 1).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execute runs the command line args and returns the process exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(runServe)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
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
		newValidateCommand(),
		newSyncCommand(),
		newRenderCommand(),
		newTokenCommand(),
		newVersionCommand(),
	)
	return root
}
