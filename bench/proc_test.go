package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stat    string
		want    time.Duration
		wantErr bool
	}{
		{"plain", "42 (capi-inplace) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 8 0 100 0 0", 2 * time.Second, false},
		{"name with spaces and parens", "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 3 7 0 0", 100 * time.Millisecond, false},
		{"short", "42 (x) S 1", 0, true},
		{"no name", "garbage", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parseStatCPU(tc.stat)
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestReadProcSelf(t *testing.T) {
	g := NewWithT(t)
	s, err := ReadProc(os.Getpid())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.RSS).To(BeNumerically(">", 1<<20))
	g.Expect(s.HWM).To(BeNumerically(">=", s.RSS))
	g.Expect(s.Anon + s.File).To(BeNumerically("<=", s.RSS))
	g.Expect(s.Anon).To(BeNumerically(">", 0))
}

func TestSumMetric(t *testing.T) {
	g := NewWithT(t)
	text := "# HELP go_memstats_mallocs_total x\n# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.234e+06\n" +
		"# TYPE go_memstats_mallocs_total_extra counter\ngo_memstats_mallocs_total_extra 1\n" +
		"# TYPE rest_client_requests_total counter\nrest_client_requests_total{code=\"200\",method=\"GET\"} 3\nrest_client_requests_total{code=\"404\",method=\"GET\"} 2\n"
	v, err := sumMetric(strings.NewReader(text), "go_memstats_mallocs_total")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(1.234e6), "a name that prefixes another family is not summed with it")
	v, err = sumMetric(strings.NewReader(text), "rest_client_requests_total")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(5.0), "every label set is summed")
	v, err = sumMetric(strings.NewReader(text), "missing_total")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(BeZero())
	_, err = sumMetric(strings.NewReader("not a metric line {\n"), "x")
	g.Expect(err).To(HaveOccurred())
}

func TestProcessNameAndCPUSince(t *testing.T) {
	stat := []byte("42 (kube-apiserver) S 1 2 3")
	for _, tc := range []struct{ cmdline, want string }{
		{"/work/bin/kube-apiserver\x00--etcd-servers=x\x00", "kube-apiserver"},
		{"bin/capi-inplace\x00extension\x00--v=2\x00", "capi-inplace extension"},
		{"/work/bin/capi-inplace-dev\x00agent\x00--simulate\x00", "capi-inplace-dev agent"},
		{"bin/capi-inplace\x00--help\x00", "capi-inplace"},
		{"", "kube-apiserver"},
	} {
		if got := ProcessName(stat, []byte(tc.cmdline)); got != tc.want {
			t.Errorf("ProcessName(%q) = %q, want %q", tc.cmdline, got, tc.want)
		}
	}
	before := CPUSnapshot{1: {"a", time.Second}, 2: {"b", 3 * time.Second}, 3: {"a", time.Second}}
	after := CPUSnapshot{1: {"a", 2 * time.Second}, 2: {"c", 500 * time.Millisecond}, 3: {"a", 4 * time.Second}, 4: {"b", time.Second}}
	got := FormatCPU(after.CPUSince(before), 5)
	if want := "total 5.5s: a 4.0s, b 1.0s, c 0.5s"; got != want {
		t.Errorf("FormatCPU = %q, want %q", got, want)
	}
}
