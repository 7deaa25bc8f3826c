// Package crcfile is the layout of spool's small state files that carry
// their own checksum (ACLs, quotas, SCRAM credentials):
//
//	<header line, e.g. "spool-acls 1">
//	<body: one line>
//	crc32c 5e3a9b1c
//
// The last line is the CRC-32C (Castagnoli) of the lines before it. Files
// are replaced atomically with vfs.WriteFileAtomic.
package crcfile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode lays out a file: header, body and the checksum line.
func Encode(header string, body []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString(header)
	buf.WriteByte('\n')
	buf.Write(body)
	buf.WriteByte('\n')
	fmt.Fprintf(&buf, "crc32c %08x\n", crc32.Checksum(buf.Bytes(), castagnoli))
	return buf.Bytes()
}

// Decode checks a file's checksum and header and returns its body. The
// error says what is wrong; callers wrap it in their own "damaged" error.
func Decode(data []byte, header string) ([]byte, error) {
	body, tail, ok := bytes.Cut(data, []byte("\ncrc32c "))
	if !ok {
		return nil, errors.New("no crc32c line")
	}
	body = append(body, '\n')
	var sum uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(tail)), "%08x", &sum); err != nil {
		return nil, fmt.Errorf("crc32c line: %v", err)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("crc32c mismatch")
	}
	got, rest, ok := bytes.Cut(body, []byte("\n"))
	if !ok || string(got) != header {
		return nil, fmt.Errorf("header %q", got)
	}
	return rest, nil
}
