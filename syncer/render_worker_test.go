package syncer

import (
	"os"

	"deputy.dev/deputy/syncer/source"
)

// The engine's tests render (source.Cache.Render runs every render in a
// render worker, this test binary started again), so this binary is a
// render worker too, selected first thing as deputy's main does. An init
// function rather than TestMain, so that a TestMain of another build (the
// envtest tests) need not repeat it.
func init() {
	if source.IsRenderWorker() {
		os.Exit(source.RenderWorkerMain())
	}
}
