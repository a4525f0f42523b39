package main

import (
	"fmt"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/policy"
)

// loadPolicyOnce loads the policy named by --policy, else by the --config
// file's policy.paths, else the embedded examples, and returns the snapshot and
// a description of where it came from.
//
// Errors: an unreadable config file, and every policy problem (file and
// document named).
func loadPolicyOnce(configFile string, paths []string) (*policy.Snapshot, string, error) {
	if len(paths) == 0 && configFile != "" {
		cfg, err := loadConfigFile(configFile)
		if err != nil {
			return nil, "the configuration " + configFile, err
		}
		paths = cfg.Policy.Paths
	}
	var src *policy.FileSource
	what := fmt.Sprintf("%v", paths)
	if len(paths) == 0 {
		src = policy.NewFileSource([]string{"."}, policy.FileSourceOptions{FS: examples.FS})
		what = "the embedded example policy"
	} else {
		// One read, no watching: nothing to wait to settle.
		src = policy.NewFileSource(paths, policy.FileSourceOptions{SettleInterval: -1})
	}
	if err := src.Load(); err != nil {
		return nil, what, err
	}
	return src.Current(), what, nil
}

// loadConfigFile reads --config (or returns the embedded default for ""),
// applies defaults and validates it.
//
// Errors: unreadable or invalid file, with every field problem.
func loadConfigFile(configFile string) (*config.DeputyConfiguration, error) {
	cfg := config.Default()
	if configFile != "" {
		var err error
		if cfg, err = config.Load(configFile); err != nil {
			return nil, err
		}
		config.SetDefaults(cfg)
	}
	if errs := config.Validate(cfg); len(errs) > 0 {
		return nil, fmt.Errorf("config file %s is invalid: %v", configFile, errs.ToAggregate())
	}
	return cfg, nil
}
