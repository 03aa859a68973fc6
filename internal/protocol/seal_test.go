package protocol

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func newKey(t *testing.T) *ecdh.PrivateKey {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var testPin = PlanPin{BaseHash: strings.Repeat("0f", 16), Action: KubeadmUpgradeNode}

func TestSealOpenRoundTrip(t *testing.T) {
	g := NewWithT(t)
	key := newKey(t)
	p := validPlan()
	p.Files[0].Content = []byte("s3cr3t-token")
	data, err := SealPlan(p, key.PublicKey(), testPin)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.Contains(data, []byte("s3cr3t-token"))).To(BeFalse(), "the secret must not be in the published bytes")
	g.Expect(bytes.Contains(data, []byte("/etc/motd"))).To(BeFalse(), "nothing of the plan body is in the clear")

	s, err := DecodeSealedPlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	hash, _ := p.Hash()
	g.Expect(s.PlanHash).To(Equal(hash), "the identity is the plaintext's hash")
	g.Expect(s.Recipient).To(Equal(KeyID(key.PublicKey())))
	g.Expect(s.Pin).To(Equal(testPin))
	got, err := s.Open(key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(p))

	again, err := SealPlan(p, key.PublicKey(), testPin)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).NotTo(Equal(data), "every seal uses a fresh ephemeral key")
}

func TestOpenWithAnotherKeyIsTyped(t *testing.T) {
	g := NewWithT(t)
	oldKey, newKey := newKey(t), newKey(t)
	data, err := SealPlan(validPlan(), oldKey.PublicKey(), testPin)
	g.Expect(err).NotTo(HaveOccurred())
	s, err := DecodeSealedPlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Open(newKey)
	var other *SealedToAnotherKeyError
	g.Expect(errors.As(err, &other)).To(BeTrue(), "got %v", err)
	g.Expect(other.Recipient).To(Equal(KeyID(oldKey.PublicKey())))
	g.Expect(other.Have).To(Equal(KeyID(newKey.PublicKey())))
}

func TestOpenRefusesAlteredEnvelopes(t *testing.T) {
	key := newKey(t)
	data, err := SealPlan(validPlan(), key.PublicKey(), testPin)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := bytes.Cut(data, []byte{'\n'})
	tests := []struct {
		name  string
		alter func([]byte) []byte
	}{
		{"flipped ciphertext byte", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }},
		{"truncated ciphertext", func(b []byte) []byte { return b[:len(b)-1] }},
		{"pin changed in the header", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"action":"upgrade-node"`), []byte(`"action":"none"`), 1)
		}},
		{"another sealed plan's ciphertext", func(b []byte) []byte {
			other, err := SealPlan(validPlan(), key.PublicKey(), testPin)
			if err != nil {
				t.Fatal(err)
			}
			_, ct, _ := bytes.Cut(other, []byte{'\n'})
			return append(append(append([]byte{}, header...), '\n'), ct...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s, err := DecodeSealedPlan(tt.alter(bytes.Clone(data)))
			g.Expect(err).NotTo(HaveOccurred())
			_, err = s.Open(key)
			g.Expect(err).To(MatchError(ErrInvalidPlan))
			g.Expect(err.Error()).To(ContainSubstring("does not open"))
		})
	}
}

func TestDecodeSealedPlanRefusesBadInput(t *testing.T) {
	key := newKey(t)
	good, err := SealPlan(validPlan(), key.PublicKey(), testPin)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := EncodePlan(validPlan())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"empty", nil, "not a sealed plan"},
		{"a plain plan", plain, "not a sealed plan"},
		{"garbage header", []byte("x\nabc"), "decode sealed plan header"},
		{"unknown field beside a value of the wrong type", bytes.Replace(bytes.Replace(good, []byte(`"kind"`), []byte(`"extra":1,"kind"`), 1), []byte(`"worker-1"`), []byte(`1`), 1), "unknown field"},
		{"other seal version", bytes.Replace(good, []byte(SealX25519AESGCM), []byte("x25519-v0"), 1), "seal"},
		{"no ciphertext", append(bytes.SplitN(good, []byte{'\n'}, 2)[0], '\n'), "shorter than its tag"},
		{"bad node name", bytes.Replace(good, []byte(`"worker-1"`), []byte(`"Worker 1"`), 1), "nodeName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := DecodeSealedPlan(tt.data)
			g.Expect(err).To(MatchError(ErrInvalidPlan))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

func TestSealPlanRefusesAnInvalidPlan(t *testing.T) {
	p := validPlan()
	p.NodeName = ""
	_, err := SealPlan(p, newKey(t).PublicKey(), testPin)
	NewWithT(t).Expect(err).To(MatchError(ErrInvalidPlan))
}

func TestParseAgentKey(t *testing.T) {
	key := newKey(t)
	tests := []struct {
		name    string
		value   string
		wantErr bool
	}{
		{"formatted key", FormatAgentKey(key.PublicKey()), false},
		{"no prefix", strings.TrimPrefix(FormatAgentKey(key.PublicKey()), AgentKeyPrefix), true},
		{"not base64", AgentKeyPrefix + "!!", true},
		{"short key", AgentKeyPrefix + "AAAA", true},
		{"empty", "", true},
		{"low-order point (all zeros): nothing can be sealed to it", AgentKeyPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pub, err := ParseAgentKey(tt.value)
			if tt.wantErr {
				g.Expect(err).To(MatchError(ErrInvalidAgentKey))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pub.Equal(key.PublicKey())).To(BeTrue())
		})
	}
}
