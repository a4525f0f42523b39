// Package manifests owns deputy's install YAML: the CustomResourceDefinitions
// (embedded from crds/, so the binary and tests use the very files an operator
// applies) and the kube-apiserver configuration that points a control plane at
// deputy (APIServerFiles: webhook kubeconfigs, the AuthorizationConfiguration
// and the ValidatingWebhookConfiguration, plus the operator's instructions).
//
// It only renders and writes files. It must not generate certificates (that is
// package certs), talk to a cluster, or decide policy.
package manifests
