package transport

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Every API the server serves on its client listener is authorized
// somewhere: a gate, its handler, or it is one Kafka leaves open. A new
// API must say which.
func TestEveryAPIIsAuthorized(t *testing.T) {
	for k := range handlers {
		key := kmsg.Key(k)
		_, gated := gates[k]
		covered := gated || slices.Contains(checkedInHandler, key) || slices.Contains(unchecked, key)
		require.True(t, covered, "%s has no authorization check", kmsg.NameForKey(k))
	}
}
