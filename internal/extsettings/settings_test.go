package extsettings

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// oneObject answers Get with a stored ExtensionConfig's content (nil: NotFound) or err.
type oneObject struct {
	client.Reader
	settings map[string]any
	err      error
}

func (o oneObject) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if o.err != nil {
		return o.err
	}
	if o.settings == nil {
		return apierrors.NewNotFound(schema.GroupResource{Group: "runtime.cluster.x-k8s.io", Resource: "extensionconfigs"}, key.Name)
	}
	obj.(*unstructured.Unstructured).Object["spec"] = map[string]any{"settings": o.settings}
	return nil
}

func TestSettings(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		reader   Reader
		want     map[string]string
		wantErr  error
		wantNone bool
	}{
		{name: "no name: the defaults", reader: Reader{Defaults: map[string]string{"a": "1"}}, want: map[string]string{"a": "1"}},
		{name: "no ExtensionConfig: the defaults", reader: Reader{Client: oneObject{}, Name: "x", Defaults: map[string]string{"a": "1"}}, want: map[string]string{"a": "1"}},
		{name: "no settings anywhere", reader: Reader{Client: oneObject{}, Name: "x"}, wantNone: true},
		{name: "the ExtensionConfig overlays the defaults", reader: Reader{Client: oneObject{settings: map[string]any{"disableInPlaceUpdates": "true", "a": "2"}}, Name: "x", Defaults: map[string]string{"a": "1", "b": "1"}},
			want: map[string]string{"disableInPlaceUpdates": "true", "a": "2", "b": "1"}},
		{name: "a read error is returned, wrapped", reader: Reader{Client: oneObject{err: boom}, Name: "x"}, wantErr: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.reader.Settings(context.Background())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantNone && len(got) != 0 {
				t.Fatalf("got %v, want none", got)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if tc.reader.Defaults != nil && got != nil {
				got["mutated"] = "yes"
				if _, ok := tc.reader.Defaults["mutated"]; ok {
					t.Fatal("the returned map is the caller's Defaults")
				}
			}
		})
	}
}
