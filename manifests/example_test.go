package manifests_test

import (
	"fmt"

	"deputy.dev/deputy/manifests"
)

func ExampleCRDs() {
	crds, err := manifests.CRDs()
	if err != nil {
		panic(err)
	}
	for _, crd := range crds {
		fmt.Println(crd.Name, crd.Spec.Versions[0].Name)
	}
	// Output:
	// applications.deputy.dev v1alpha1
	// appprojects.deputy.dev v1alpha1
}
