package policy

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestKubeadmEtcdRestore: kubeadm.etcdRestore takes the three policies, refuses
// anything else, and the default (absent or IfDataChanged) is empty in a plan.
func TestKubeadmEtcdRestore(t *testing.T) {
	tests := []struct {
		yaml    string
		want    protocol.EtcdRestore
		wantErr string
	}{
		{yaml: "{}", want: ""},
		{yaml: "kubeadm: {etcdRestore: IfDataChanged}", want: ""},
		{yaml: "kubeadm: {etcdRestore: Always}", want: protocol.EtcdRestoreAlways},
		{yaml: "kubeadm: {etcdRestore: Never}", want: protocol.EtcdRestoreNever},
		{yaml: "kubeadm: {etcdRestore: always}", wantErr: `kubeadm.etcdRestore "always" is not IfDataChanged, Always or Never`},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrInvalid))
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.EtcdRestore()).To(Equal(tt.want))
		})
	}
}
