package webhook

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/config"
)

// Every limit an operator sets in sync.limits reaches the engine: a field
// added to one side and not mapped is zero on the other, and the engine
// would silently use its default.
func TestEngineLimitsMapsEveryField(t *testing.T) {
	in := config.SyncLimits{
		MaxFileBytes:     resource.MustParse("1Mi"),
		MaxRenderBytes:   resource.MustParse("2Mi"),
		MaxFiles:         3,
		MaxObjects:       4,
		MaxRenderMemory:  resource.MustParse("5Mi"),
		MaxFetchBytes:    resource.MustParse("6Mi"),
		MaxFetchObjects:  7,
		OperationTimeout: metav1.Duration{Duration: 8 * time.Second},
	}
	cv := reflect.ValueOf(in)
	for i := range cv.NumField() {
		if cv.Field(i).IsZero() {
			t.Fatalf("the test sets no value for config.SyncLimits.%s: add one", cv.Type().Field(i).Name)
		}
	}
	out := engineLimits(in)
	ev := reflect.ValueOf(out)
	for i := range ev.NumField() {
		if ev.Field(i).IsZero() {
			t.Errorf("syncer.Limits.%s is not mapped from config sync.limits", ev.Type().Field(i).Name)
		}
	}
	if out.MaxRenderMemory != 5<<20 || out.MaxFetchObjects != 7 || out.MaxFileBytes != 1<<20 || out.OperationTimeout != 8*time.Second {
		t.Errorf("engineLimits = %+v", out)
	}
}
