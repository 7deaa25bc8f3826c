package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reads and writes the java.util.Properties text format, the
// format of Kafka's server.properties, as Properties.load(Reader) does:
//
//	# a comment line, and so is one starting with !
//	key=value
//	key: value
//	key value
//	long.key = first part, \
//	           second part (a trailing \ continues the line; the next
//	           line's leading blanks are dropped)
//	escaped\ key\=with\:separators = tab\there, \u00e9, \\ a backslash
//
// Blanks are space, tab and form feed. A logical line's leading blanks are
// skipped; a line whose first non-blank character is # or ! is a comment
// (and never continued). The key runs to the first unescaped =, : or
// blank; the separator is optional blanks, at most one = or :, and
// optional blanks; the value is the rest of the line, trailing blanks
// included. Escapes are \t \n \r \f, \uXXXX (UTF-16, surrogate pairs
// combined) and \x for any other x, which is x. The last of a key's
// lines wins. Unlike Java, which reads a properties stream as ISO-8859-1,
// the file is taken as UTF-8, as Kafka's files nearly always are in
// practice (anything else can be written with \u escapes).

// errMalformedEscape is a \u escape not followed by four hexadecimal
// digits, the one thing the format refuses.
var errMalformedEscape = errors.New(`malformed \uXXXX escape`)

// propertiesError is a malformed line of a properties file.
type propertiesError struct {
	Line int // the first line of the logical line, from 1
	Err  error
}

func (e *propertiesError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *propertiesError) Unwrap() error { return e.Err }

// property is a key's value in a properties file and the line that set
// it.
type property struct {
	Value string
	Line  int // the first line of the logical line that set it, from 1
}

// readProperties reads a properties file. The map holds each key's last
// value; an error is a *propertiesError.
func readProperties(r io.Reader) (map[string]property, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	props := map[string]property{}
	line := 0
	for len(data) > 0 {
		var logical []byte
		first := line + 1
		for cont := false; len(data) > 0; {
			var natural []byte
			natural, data = nextLine(data)
			line++
			natural = bytes.TrimLeft(natural, " \t\f")
			if !cont && (len(natural) == 0 || natural[0] == '#' || natural[0] == '!') {
				first = line + 1 // blank or comment: not a logical line
				continue
			}
			if trailingBackslashes(natural)%2 == 1 {
				logical = append(logical, natural[:len(natural)-1]...)
				cont = true
				continue
			}
			logical = append(logical, natural...)
			break
		}
		if logical == nil {
			continue
		}
		key, value, err := splitProperty(logical)
		if err != nil {
			return nil, &propertiesError{Line: first, Err: err}
		}
		props[key] = property{Value: value, Line: first}
	}
	return props, nil
}

// nextLine splits data after its first line terminator (\n, \r or \r\n),
// which the line does not include.
func nextLine(data []byte) (line, rest []byte) {
	i := bytes.IndexAny(data, "\r\n")
	if i < 0 {
		return data, nil
	}
	if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
		return data[:i], data[i+2:]
	}
	return data[:i], data[i+1:]
}

func trailingBackslashes(b []byte) int {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	return n
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

// splitProperty splits a logical line (its leading blanks skipped, its
// continuations joined) into its unescaped key and value.
func splitProperty(l []byte) (key, value string, err error) {
	end := 0
	for end < len(l) {
		c := l[end]
		if c == '\\' {
			end += 2
			continue
		}
		if c == '=' || c == ':' || isBlank(c) {
			break
		}
		end++
	}
	end = min(end, len(l))
	start := end
	sep := false
separator:
	for start < len(l) {
		c := l[start]
		switch {
		case isBlank(c):
		case !sep && (c == '=' || c == ':'):
			sep = true
		default:
			break separator
		}
		start++
	}
	if key, err = unescapeProperty(l[:end]); err != nil {
		return "", "", err
	}
	if value, err = unescapeProperty(l[start:]); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// unescapeProperty resolves the escapes of a key or value.
func unescapeProperty(b []byte) (string, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b), nil
	}
	var out []byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(b) {
			break // a lone backslash at the end of the file: nothing
		}
		switch c = b[i]; c {
		case 't':
			out = append(out, '\t')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 'f':
			out = append(out, '\f')
		case 'u':
			r, n, err := unicodeEscape(b[i-1:])
			if err != nil {
				return "", err
			}
			out = utf8.AppendRune(out, r)
			i += n - 2
		default:
			out = append(out, c)
		}
	}
	return string(out), nil
}

// unicodeEscape decodes the \uXXXX at the start of b, and the low
// surrogate's escape after it when it is a high surrogate. It returns the
// rune (U+FFFD for an unpaired surrogate) and the bytes read.
func unicodeEscape(b []byte) (rune, int, error) {
	u, ok := hex4(b)
	if !ok {
		return 0, 0, errMalformedEscape
	}
	r := rune(u)
	if utf16.IsSurrogate(r) {
		if lo, ok := hex4(b[6:]); ok {
			if pair := utf16.DecodeRune(r, rune(lo)); pair != utf8.RuneError {
				return pair, 12, nil
			}
		}
		return utf8.RuneError, 6, nil
	}
	return r, 6, nil
}

// hex4 decodes b's leading \uXXXX.
func hex4(b []byte) (uint16, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var u uint16
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint16(c)
	}
	return u, true
}

// writeProperties writes m in the properties format, a line a key in key
// order, escaped so that readProperties reads m back.
func writeProperties(w io.Writer, m map[string]string) error {
	var b strings.Builder
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		escapeProperty(&b, k, true)
		b.WriteByte('=')
		escapeProperty(&b, m[k], false)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// escapeProperty writes s escaped as a key (every separator and blank, and
// a leading comment character) or a value (its leading blanks).
func escapeProperty(b *strings.Builder, s string, key bool) {
	leading := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\f':
			b.WriteString(`\f`)
		case '=', ':', '#', '!':
			if key {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		case ' ':
			if key || leading {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
		leading = leading && c == ' '
	}
}
