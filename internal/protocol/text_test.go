package protocol

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	. "github.com/onsi/gomega"
)

// TestDecodeBoundsAgentText: a node's report reaches management objects only
// bounded: a reason that is no identifier is refused (with an error that quotes
// little of it), messages and names are cut and stripped of line breaks and
// invisible characters, for the status and the staging status alike.
func TestDecodeBoundsAgentText(t *testing.T) {
	huge := strings.Repeat("x", 200<<10)
	injected := "rolled back\nE1204 forged log line \u202egnirts desrever" + huge
	tests := []struct {
		name   string
		status NodeStatus
		stage  StagingStatus
		// wantErr: refused; else the bounded fields.
		wantErr bool
	}{
		{name: "200 KiB reason", status: NodeStatus{Reason: huge}, stage: StagingStatus{Reason: huge}, wantErr: true},
		{name: "reason with a line break", status: NodeStatus{Reason: "GateFailed\nforged"}, stage: StagingStatus{Reason: "TooLarge\nforged"}, wantErr: true},
		{name: "200 KiB message with a forged line", status: NodeStatus{Reason: ReasonRollbackFailed, Message: injected, Action: huge, Gate: huge},
			stage: StagingStatus{Reason: StageReasonDigestMismatch, Message: injected, Item: StageItemName(huge)}},
		{name: "short text is kept", status: NodeStatus{Reason: "GateFailed", Message: "gate apiserver failed: 503", Action: "gates", Gate: "apiserver"},
			stage: StagingStatus{Reason: StageReasonUnreachable, Message: "GET https://example.com: 503", Item: StageKubeadm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			st := tt.status
			st.PlanHash, st.Phase = "abc", PhaseFailed
			enc, err := EncodeStatus(st)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := DecodeStatus(enc)
			sg := tt.stage
			sg.PlanHash, sg.Phase = "abc", StagePhaseFailed
			encStage, err2 := EncodeStagingStatus(sg)
			g.Expect(err2).NotTo(HaveOccurred())
			gotStage, errStage := DecodeStagingStatus(encStage)
			if tt.wantErr {
				g.Expect(errors.Is(err, ErrInvalidStatus)).To(BeTrue(), "got %v", err)
				g.Expect(len(err.Error())).To(BeNumerically("<", 256))
				g.Expect(errors.Is(errStage, ErrInvalidStagingStatus)).To(BeTrue(), "got %v", errStage)
				g.Expect(len(errStage.Error())).To(BeNumerically("<", 256))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(errStage).NotTo(HaveOccurred())
			for _, f := range []struct {
				text, sent string
				limit      int
			}{
				{got.Message, st.Message, MaxMessageBytes}, {got.Action, st.Action, MaxNameBytes}, {got.Gate, st.Gate, MaxNameBytes},
				{gotStage.Message, sg.Message, MaxMessageBytes}, {string(gotStage.Item), string(sg.Item), MaxNameBytes},
			} {
				g.Expect(len(f.text)).To(BeNumerically("<=", f.limit))
				g.Expect(utf8.ValidString(f.text)).To(BeTrue())
				g.Expect(strings.IndexFunc(f.text, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) })).To(Equal(-1), f.text)
				if len(f.sent) <= f.limit && !strings.ContainsAny(f.sent, "\n\u202e") {
					g.Expect(f.text).To(Equal(f.sent), "short text is kept as sent")
				} else {
					g.Expect(f.text).To(HaveSuffix("…"))
				}
			}
			g.Expect(got.Reason).To(Equal(st.Reason))
		})
	}
}

func TestBoundText(t *testing.T) {
	g := NewWithT(t)
	g.Expect(BoundText("a\tb\r\nc", 100)).To(Equal("a b  c"))
	g.Expect(BoundText("\xff\xfeok", 100)).To(Equal(" ok"), "invalid UTF-8 becomes one space per run")
	g.Expect(BoundText("ééééé", 7)).To(Equal("éé…"), "cut at a character boundary, within the limit")
	g.Expect(BoundText("abcd", 3)).To(Equal("…"))
	g.Expect(BoundText("abc", 2)).To(Equal("ab"), "no room for the ellipsis")
	g.Expect(BoundText("abc", 0)).To(BeEmpty())
}
