package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
)

// TestGuardFollowsExtensionConfigName: the guard reads the settings of the
// ExtensionConfig that --extension-config-name names (docs/guard.md,
// "Settings"), as the single-node path does, so that an ExtensionConfig
// installed under another name (or a second extension of a test stack) is the
// one whose disableInPlaceUpdates the guard honours. It used a fixed name.
func TestGuardFollowsExtensionConfigName(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "named", args: []string{"--extension-config-name=inplace-prod"}, want: "inplace-prod"},
		{name: "unset: no settings", args: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var got extensionOptions
			cmd := newExtensionCommandWith(func(_ context.Context, o extensionOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			g.Expect(cmd.Execute()).To(Succeed())
			g.Expect(guardOptions(got).ExtensionConfig).To(Equal(tt.want))
		})
	}
}
