// Package config defines deputy's versioned configuration file
// (config.deputy.dev/v1alpha1 DeputyConfiguration): its types, defaults,
// decoding (Load, Decode) and validation (Validate, every problem at once
// with its field path), its rendering for `deputy serve --print-config`
// (Marshal), and the client configuration its cluster section describes
// (Cluster.RESTConfig). Many fields are also flags of `deputy serve`; flags
// override the file.
//
// It must not start anything and must not import deputy's components: the
// authorizer, tokenreview, syncer and webhook packages take plain options,
// and mapping this file onto them is the composition root's job.
package config
