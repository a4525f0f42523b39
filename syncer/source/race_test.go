//go:build race

package source

// raceEnabled: the race detector's shadow memory counts against a render
// worker's RLIMIT_AS, so an allocation past maxRenderMemory can fail in
// ThreadSanitizer (its own message, exit 66) before Go's runtime reports
// it; deputy is never built with -race.
const raceEnabled = true
