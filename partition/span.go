package partition

import "github.com/spoolmq/spool/log"

// Span finds, without reading them, the committed batches Fetch would
// return from offset - at most maxBytes, but always the first batch whole -
// for a zero-copy send (see log.Span); it does not wait. The caller must
// Release the span. An offset outside [StartOffset, HighWatermark] is an
// error wrapping log.ErrOffsetOutOfRange.
func (p *Partition) Span(offset int64, maxBytes int) (log.Span, error) {
	return p.log.Span(offset, maxBytes, p.HighWatermark())
}
