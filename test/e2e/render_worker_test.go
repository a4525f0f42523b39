package e2e

import (
	"os"

	"deputy.dev/deputy/syncer/source"
)

// The tests' in-process sync engines (sync_test.go) render through render
// workers, this test binary started again: it must become one before
// TestMain starts anything (a control plane). An init function rather than
// a line in TestMain, so that no worker ever reaches TestMain.
func init() {
	if source.IsRenderWorker() {
		os.Exit(source.RenderWorkerMain())
	}
}
