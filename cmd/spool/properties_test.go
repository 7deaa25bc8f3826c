package main

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadProperties checks the reader against the java.util.Properties
// rules, one case each.
func TestReadProperties(t *testing.T) {
	type kv = map[string]property
	for _, tc := range []struct {
		name string
		in   string
		want kv
	}{
		{"equals", "a=b", kv{"a": {"b", 1}}},
		{"colon", "a:b", kv{"a": {"b", 1}}},
		{"blank separator", "a b", kv{"a": {"b", 1}}},
		{"blanks around separator", "a \t = \f b", kv{"a": {"b", 1}}},
		{"blanks then colon", "a   :b", kv{"a": {"b", 1}}},
		{"only one separator taken", "a==b", kv{"a": {"=b", 1}}},
		{"blank then two separators", "a = :b", kv{"a": {":b", 1}}},
		{"leading blanks skipped", "   \t a=b", kv{"a": {"b", 1}}},
		{"trailing blanks kept", "a=b  ", kv{"a": {"b  ", 1}}},
		{"key only", "a", kv{"a": {"", 1}}},
		{"key and separator only", "a=", kv{"a": {"", 1}}},
		{"empty key", "=b", kv{"": {"b", 1}}},
		{"hash comment", "# a=b\nc=d", kv{"c": {"d", 2}}},
		{"bang comment", "! a=b\nc=d", kv{"c": {"d", 2}}},
		{"indented comment", "   # a=b", kv{}},
		{"hash inside a value", "a=b # c", kv{"a": {"b # c", 1}}},
		{"comment not continued", "# a \\\nc=d", kv{"c": {"d", 2}}},
		{"comments after a blank line", "a=b\n\n# c\n! d\n#e\nf=g", kv{"a": {"b", 1}, "f": {"g", 6}}},
		{"blank lines", "\n\n  \t\na=b\n\n", kv{"a": {"b", 4}}},
		{"CRLF", "a=b\r\nc=d\r\n", kv{"a": {"b", 1}, "c": {"d", 2}}},
		{"CR", "a=b\rc=d", kv{"a": {"b", 1}, "c": {"d", 2}}},
		{"continuation", "a=b\\\n    c\nd=e", kv{"a": {"bc", 1}, "d": {"e", 3}}},
		{"continuation keeps the blank before the backslash", "a=b \\\n  c", kv{"a": {"b c", 1}}},
		{"continuation over CRLF", "a=b\\\r\n  c", kv{"a": {"bc", 1}}},
		{"continuation of a key", "ke\\\n  y=v", kv{"key": {"v", 1}}},
		{"continued line starting with #", "a=b\\\n#c", kv{"a": {"b#c", 1}}},
		{"continuation into a blank line", "a=b\\\n\nc=d", kv{"a": {"b", 1}, "c": {"d", 3}}},
		{"continuation at end of file", "a=b\\", kv{"a": {"b", 1}}},
		{"escaped backslash is no continuation", "a=b\\\\\nc=d", kv{"a": {"b\\", 1}, "c": {"d", 2}}},
		{"three backslashes continue", "a=b\\\\\\\nc", kv{"a": {"b\\c", 1}}},
		{"escapes", `a=\t\n\r\f\\`, kv{"a": {"\t\n\r\f\\", 1}}},
		{"other escapes are the character", `a=\q\=\:\ \#\"`, kv{"a": {"q=: #\"", 1}}},
		{"escaped separators in key", `a\=b\:c\ d=e`, kv{"a=b:c d": {"e", 1}}},
		{"escaped leading blank in value", `a=\  b`, kv{"a": {"  b", 1}}},
		{"unicode", `a=\u00e9\u4E2D`, kv{"a": {"é中", 1}}},
		{"unicode key", `\u0041=b`, kv{"A": {"b", 1}}},
		{"surrogate pair", `a=\uD83D\uDE00`, kv{"a": {"😀", 1}}},
		{"unpaired surrogate", `a=\uD83Dx`, kv{"a": {"\uFFFDx", 1}}},
		{"utf-8 as is", "a=é", kv{"a": {"é", 1}}},
		{"last duplicate wins", "a=1\nb=2\na=3", kv{"a": {"3", 3}, "b": {"2", 2}}},
		{"line of a continued value is its first", "x=1\na=b\\\nc\nd=e", kv{"x": {"1", 1}, "a": {"bc", 2}, "d": {"e", 4}}},
		{"empty file", "", kv{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readProperties(strings.NewReader(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestReadPropertiesMalformedEscape: a \u without four hex digits is an
// error naming its line, never a panic.
func TestReadPropertiesMalformedEscape(t *testing.T) {
	for _, tc := range []struct {
		in   string
		line int
	}{
		{`a=\u`, 1},
		{`a=\u12`, 1},
		{`a=\u12G4`, 1},
		{"x=1\n\n" + `a=\uzzzz`, 3},
		{`\u00=b`, 1},
		{`a=\uD83D\u`, 1},
	} {
		_, err := readProperties(strings.NewReader(tc.in))
		require.ErrorIs(t, err, errMalformedEscape, tc.in)
		var pe *propertiesError
		require.True(t, errors.As(err, &pe))
		require.Equal(t, tc.line, pe.Line, tc.in)
		require.Contains(t, err.Error(), "line ")
	}
	// Java joins a continued line before it unescapes, so an escape may
	// span the break.
	got, err := readProperties(strings.NewReader("a=ok\nb=\\u00\\\n  41"))
	require.NoError(t, err)
	require.Equal(t, "A", got["b"].Value)
}

// TestWriteProperties: what writeProperties writes reads back the same,
// for keys and values that need every escape.
func TestWriteProperties(t *testing.T) {
	m := map[string]string{
		"plain": "value", "": "empty key", "k=:# !": "v", " lead": "  lead", "#c": "!c",
		"tabs\t\n\r\f": "\t\n\r\f", `back\slash`: `\`, "uni": "é😀", "trail": "x  ", "empty": "",
	}
	var b strings.Builder
	require.NoError(t, writeProperties(&b, m))
	got, err := readProperties(strings.NewReader(b.String()))
	require.NoError(t, err)
	require.Equal(t, m, values(got), b.String())
}

func values(props map[string]property) map[string]string {
	m := make(map[string]string, len(props))
	for k, p := range props {
		m[k] = p.Value
	}
	return m
}

// FuzzProperties: any input reads without a panic, and a map read back
// from its writing is the same map.
func FuzzProperties(f *testing.F) {
	for _, s := range []string{"a=b", "a b\\\n c", "#x\n!y\nk:v", `\u00e9=\uD83D\uDE00`, `a=\u12`, "a\\", "\\", "=\\\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		props, err := readProperties(strings.NewReader(in))
		if err != nil {
			return
		}
		m := values(props)
		var b strings.Builder
		if err := writeProperties(&b, m); err != nil {
			t.Fatal(err)
		}
		again, err := readProperties(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("reading %q: %v", b.String(), err)
		}
		if got := values(again); !maps.Equal(m, got) {
			t.Fatalf("%q read as %q, written as %q, read back as %q", in, m, b.String(), got)
		}
	})
}
