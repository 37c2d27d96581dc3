package lease

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestLoadReportValidate(t *testing.T) {
	groups := make([]float64, LoadGroups)
	hot := make([]HotKey, MaxHotKeys)
	for i := range hot {
		hot[i] = HotKey{Hash: uint64(i), Rate: float64(i)}
	}
	ok := []LoadReport{{}, {Rate: 5}, {Rate: MaxLoad, Groups: groups}, {Rate: 1, Hot: hot}, {Hot: []HotKey{{Hash: 1 << 63, Rate: MaxLoad}}}}
	for _, l := range ok {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := func(i int, x float64) []float64 {
		g := make([]float64, LoadGroups)
		g[i] = x
		return g
	}
	cases := []struct {
		l     LoadReport
		field string
	}{
		{LoadReport{Rate: math.NaN()}, "load.rate"},
		{LoadReport{Rate: math.Inf(1)}, "load.rate"},
		{LoadReport{Rate: -1}, "load.rate"},
		{LoadReport{Rate: 2 * MaxLoad}, "load.rate"},
		{LoadReport{Groups: make([]float64, 3)}, "load.groups"},
		{LoadReport{Groups: make([]float64, LoadGroups+1)}, "load.groups"},
		{LoadReport{Groups: bad(7, math.NaN())}, "load.groups[7]"},
		{LoadReport{Groups: bad(63, -0.5)}, "load.groups[63]"},
		{LoadReport{Groups: bad(0, math.Inf(-1))}, "load.groups[0]"},
		{LoadReport{Hot: make([]HotKey, MaxHotKeys+1)}, "load.hot has 9"},
		{LoadReport{Hot: []HotKey{{Hash: 1}, {Hash: 2, Rate: math.NaN()}}}, "load.hot[1].rate"},
		{LoadReport{Hot: []HotKey{{Hash: 1, Rate: -1}}}, "load.hot[0].rate"},
		{LoadReport{Hot: []HotKey{{Hash: 1, Rate: math.Inf(1)}}}, "load.hot[0].rate"},
		{LoadReport{Hot: []HotKey{{Hash: 1, Rate: 2 * MaxLoad}}}, "load.hot[0].rate"},
		{LoadReport{Hot: []HotKey{{Hash: 5}, {Hash: 6}, {Hash: 5}}}, "load.hot[2].hash"},
	}
	for _, c := range cases {
		err := c.l.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v; want ErrInvalid naming %s", c.l.Rate, err, c.field)
		}
	}
	if LoadGroup(0) != 0 || LoadGroup(math.MaxUint64) != 63 || LoadGroup(1<<58) != 1 {
		t.Error("LoadGroup: wrong top bits")
	}
}

// A renewal carries a load report, validated on every one: a good report
// costs no allocation (the field names of errors are formatted only for an
// error).
func TestLoadReportValidateAllocates(t *testing.T) {
	l := LoadReport{Rate: 1, Groups: make([]float64, LoadGroups), Hot: make([]HotKey, MaxHotKeys)}
	for i := range l.Hot {
		l.Hot[i] = HotKey{Hash: uint64(i), Rate: 1}
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Validate of a good report: %v allocations; want 0", n)
	}
}
