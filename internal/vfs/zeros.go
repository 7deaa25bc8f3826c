package vfs

import "os"

// writeZeros allocates by writing zeros over the part of [off, off+n) that
// lies beyond the end of the file, where fallocate is not available. Bytes
// already in the file are left alone.
func writeZeros(f *os.File, off, n int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	end := off + n
	pos := max(st.Size(), off)
	zero := make([]byte, 64<<10)
	for pos < end {
		chunk := min(int64(len(zero)), end-pos)
		if _, err := f.WriteAt(zero[:chunk], pos); err != nil {
			return err
		}
		pos += chunk
	}
	return nil
}
