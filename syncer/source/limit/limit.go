// Package limit holds the error of an exceeded fetch or render limit
// (Error, source.LimitError is an alias of it) and the configuration
// fields it names, so that package source and the packages its render
// workers use (syncer/source/chartrepo) report limits as one type.
//
// It must not import anything of deputy's: it is the leaf both sides share.
package limit

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The configuration fields of the limits, as error messages name them.
const (
	FieldMaxFileBytes     = "sync.limits.maxFileBytes"
	FieldMaxRenderBytes   = "sync.limits.maxRenderBytes"
	FieldMaxFiles         = "sync.limits.maxFiles"
	FieldMaxObjects       = "sync.limits.maxObjects"
	FieldMaxRenderMemory  = "sync.limits.maxRenderMemory"
	FieldMaxFetchBytes    = "sync.limits.maxFetchBytes"
	FieldMaxFetchObjects  = "sync.limits.maxFetchObjects"
	FieldOperationTimeout = "sync.limits.operationTimeout"
)

// Error is a limit an operation exceeded. Its message names the
// configuration field to raise (or the input to shrink).
type Error struct {
	// Field is the configuration field, e.g. FieldMaxFileBytes.
	Field string
	// What says what exceeded it, e.g. `file "app/big.yaml" (40 MiB)`.
	What string
	// Limit is the limit's value as configured, e.g. "32Mi".
	Limit string
}

// Error says what exceeded which field, and the fix.
func (e *Error) Error() string {
	return fmt.Sprintf("%s exceeds %s (%s): shrink the input or raise the limit in deputy's configuration", e.What, e.Field, e.Limit)
}

// Bytes renders n as a binary quantity ("32Mi") as the configuration
// writes it.
func Bytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}
