package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Every subcommand parses its flags here, so that they behave the same
// everywhere: flags may follow positional arguments ("spool check DIR
// --quiet"; the flag package alone stops at the first non-flag), and
// errors name flags as help spells them, --flag (the flag package says
// -flag).

// parseFlags parses args into fs and returns the positional arguments,
// in order. Flags may come before, between and after them; everything
// after "--" is positional. On an error it prints the error, with flags
// spelt --flag, and the usage, and returns the error (flag.ErrHelp after
// --help, having printed only the usage).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints its error before calling Usage; silence it
	// and print the error in our spelling instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()

	var positional []string
	for {
		err := fs.Parse(args)
		if err != nil {
			fs.SetOutput(out)
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(out, "spool %s: %s\n", fs.Name(), dashDashFlags(err.Error()))
			}
			usage()
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// dashDashFlags rewrites the flag package's error messages, which name a
// flag as -name, to name it --name.
func dashDashFlags(msg string) string {
	for _, prefix := range []string{
		"flag provided but not defined: ",
		"flag needs an argument: ",
	} {
		if name, ok := strings.CutPrefix(msg, prefix+"-"); ok && !strings.HasPrefix(name, "-") {
			return prefix + "--" + name
		}
	}
	// invalid value "x" for flag -name: ...; invalid boolean value "x" for -name: ...
	for _, marker := range []string{" for flag -", " for -"} {
		if i := strings.Index(msg, marker); i >= 0 {
			return msg[:i] + marker[:len(marker)-1] + "--" + msg[i+len(marker):]
		}
	}
	return msg
}

// parseArgs parses the flags of a command that takes no positional
// arguments. It returns the exit status to end with and false when the
// command should not go on: 0 after --help, 2 on a usage error (printed)
// or stray arguments.
func parseArgs(fs *flag.FlagSet, args []string) (int, bool) {
	positional, ok, code := parsePositional(fs, args)
	if !ok {
		return code, false
	}
	if len(positional) > 0 {
		return usageError(fs, "unexpected argument %q", positional[0]), false
	}
	return exitOK, true
}

// parsePositional parses the flags of a command that takes positional
// arguments and returns them. ok is false, with the exit status in code,
// when the command should not go on: 0 after --help, 2 on a usage error.
func parsePositional(fs *flag.FlagSet, args []string) (positional []string, ok bool, code int) {
	positional, err := parseFlags(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, false, exitOK
	case err != nil:
		return nil, false, exitUsage
	}
	return positional, true, exitOK
}
