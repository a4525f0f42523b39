// Package secretfile owns reading small files that hold one secret or key:
// a token, a password, a webhook secret, a PEM key or certificate, the
// ServiceAccount namespace file. Read caps the size, so a wrong path (a log
// file, a device) fails with a clear error instead of filling memory, and
// ReadTrimmed strips the white space editors and `echo` leave around the
// value.
//
// It must not log, cache or keep what it reads, and must not decide what an
// empty value means: callers name the file's setting and the fix in their
// own errors.
package secretfile
