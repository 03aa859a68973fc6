package protocol

import "testing"

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		ok   bool
		want string
	}{
		{"v1.36.0", true, "1.36.0"},
		{"v1.36.0-rc.1", true, "1.36.0-rc.1"},
		{"v1.36.0+k3s1", true, "1.36.0+k3s1"},
		{"1.36.0", false, ""},   // Kubernetes versions carry their "v"
		{"v1.36", false, ""},    // no padding of a missing patch number
		{"v01.36.0", false, ""}, // no leading zeros
		{" v1.36.0", false, ""},
		{"", false, ""},
		{"vx", false, ""},
	} {
		v, err := ParseVersion(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseVersion(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && v.String() != tt.want {
			t.Errorf("ParseVersion(%q) = %s, want %s", tt.in, v, tt.want)
		}
	}
}

func TestSameRelease(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"v1.36.0", "v1.36.0", true},
		{"v1.36.0", "v1.36.0+k3s1", true},
		{"v1.36.0+a", "v1.36.0+b", true},
		{"v1.36.0", "v1.36.1", false},
		{"v1.36.0-rc.1", "v1.36.0", false},
		{"v1.36.0", "1.36.0", false},
		{"", "", false},
		{"garbage", "garbage", false},
	} {
		if got := SameRelease(tt.a, tt.b); got != tt.want {
			t.Errorf("SameRelease(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestClassifyVersionStep(t *testing.T) {
	for _, tt := range []struct {
		from, to string
		want     VersionStep
	}{
		{"v1.35.0", "v1.35.0", StepSame},
		{"v1.35.0", "v1.35.0+build", StepSame},
		{"v1.35.0", "v1.35.4", StepPatch},
		{"v1.36.0-rc.1", "v1.36.0", StepPatch},
		{"v1.35.4", "v1.36.0", StepMinor},
		{"v1.36.0", "v1.35.9", StepDowngrade},
		{"v1.36.1", "v1.36.0", StepDowngrade},
		{"v1.35.0", "v1.37.0", StepSkipsMinor},
		{"v1.35.0", "v2.0.0", StepMajor},
		{"v2.0.0", "v1.36.0", StepMajor},
	} {
		from, err := ParseVersion(tt.from)
		if err != nil {
			t.Fatal(err)
		}
		to, err := ParseVersion(tt.to)
		if err != nil {
			t.Fatal(err)
		}
		got := ClassifyVersionStep(from, to)
		if got != tt.want {
			t.Errorf("ClassifyVersionStep(%s, %s) = %d, want %d", tt.from, tt.to, got, tt.want)
		}
		if got.Upgrade() != (tt.want == StepPatch || tt.want == StepMinor) {
			t.Errorf("%d.Upgrade() = %v", got, got.Upgrade())
		}
	}
}
