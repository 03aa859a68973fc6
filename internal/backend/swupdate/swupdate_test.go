package swupdate

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func TestReportedSuccess(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want bool
	}{
		{name: "success line (recorded swupdate 2022.12 output)", out: "[INFO ] : SWUPDATE successful ! SWUPDATE successful !\n[INFO ] : No SWUPDATE running :  Waiting for requests...\n", want: true},
		{name: "failure (recorded)", out: "[ERROR] : SWUPDATE failed [1] Image invalid or corrupted. Not installing ...\n", want: false},
		{name: "both", out: "SWUPDATE successful\nSWUPDATE failed\n", want: false},
		{name: "nothing", out: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(reportedSuccess(backend.Result{Stdout: []byte(tt.out), ExitCode: 1})).To(Equal(tt.want))
		})
	}
}

func TestParseEnv(t *testing.T) {
	g := NewWithT(t)
	g.Expect(parseEnv("boot_slot=B\nupgrade_available=1\nbootcmd=run a; run b=c\n\n")).To(Equal(map[string]string{
		"boot_slot": "B", "upgrade_available": "1", "bootcmd": "run a; run b=c",
	}))
}

func TestNewValidates(t *testing.T) {
	r := &backendtest.Runner{}
	ab := []Slot{{Name: "A", Device: "/dev/mmcblk0p2", Selection: "stable,copy1"}, {Name: "B", Device: "/dev/mmcblk0p3", Selection: "stable,copy2"}}
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{name: "valid", o: Options{Runner: r, Slots: ab, StateDir: "/var/lib/capi-inplace"}, ok: true},
		{name: "no runner", o: Options{Slots: ab, StateDir: "/x"}},
		{name: "one slot", o: Options{Runner: r, Slots: ab[:1], StateDir: "/x"}},
		{name: "same device twice", o: Options{Runner: r, Slots: []Slot{ab[0], {Name: "B", Device: ab[0].Device, Selection: "s,c"}}, StateDir: "/x"}},
		{name: "slot without selection", o: Options{Runner: r, Slots: []Slot{ab[0], {Name: "B", Device: "/dev/b"}}, StateDir: "/x"}},
		{name: "relative state dir", o: Options{Runner: r, Slots: ab, StateDir: "state"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			b, err := New(tt.o)
			if !tt.ok {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(b.o.SlotVar).To(Equal("boot_slot"))
			g.Expect(b.o.CmdlinePath).To(Equal("/proc/cmdline"))
		})
	}
}
