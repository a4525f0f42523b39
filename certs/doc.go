// Package certs owns deputy's X.509 material on disk: a private CA, the serving
// certificate kube-apiserver verifies when it calls deputy's webhooks, and the
// client certificate kube-apiserver presents to deputy. It generates them
// (Init, idempotent and atomic, so a hot-reloading server never reads half a
// file), and loads them back for `deputy config apiserver`
// (LoadAPIServerClient) and its checks (CheckServingHost). Files are read
// with a size cap (package internal/secretfile).
//
// It must not know about HTTP serving, flags or kube-apiserver configuration
// formats: the webhook package serves with these files (and reloads them), the
// manifests package embeds them into kube-apiserver configuration.
package certs
