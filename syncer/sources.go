package syncer

import (
	"fmt"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source"
)

// checkSources runs the checks that need no fetch on every source, ref
// sources included: spec.sources' own rules (ValidateSources), whether
// deputy renders the source (source.CheckSupported) and whether the
// project permits its repository (sourceRepos). The first failure names the
// source.
func checkSources(c *policy.CompiledProject, app *v1alpha1.Application) error {
	spec := &app.Spec
	if spec.HasMultipleSources() {
		if err := spec.ValidateSources().ToAggregate(); err != nil {
			return fmt.Errorf("%w: fix the Application", err)
		}
	}
	for i, src := range spec.GetSources() {
		err := source.CheckSupported(src)
		if err == nil {
			err = checkSource(c, src)
		}
		if err != nil && spec.HasMultipleSources() {
			return fmt.Errorf("%s: %w", source.DescribeSource(spec, i), err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
