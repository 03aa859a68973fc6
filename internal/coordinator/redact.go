package coordinator

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// redactingRecorder formats every Event note and redacts secret values from it
// (protocol.RedactKnownSecrets) before the Event leaves: notes quote agent status
// and errors. New wraps Options.Recorder in it, so no Event bypasses it.
type redactingRecorder struct{ next EventRecorder }

func (r redactingRecorder) Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.next.Eventf(regarding, related, eventtype, reason, action, "%s", protocol.RedactKnownSecrets(fmt.Sprintf(note, args...)))
}
