package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/deploy/buildinfo"
)

// newRootCommand builds the command tree, writing to stdout and stderr.
// Errors are returned, never printed here: main prints them once.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "cfgd",
		Short: "cfgd runs the whole service from one binary",
		Long: `cfgd runs the whole service from one binary: the API and the event pipeline
(serve), task workers (worker), and the commands operators use.

Settings come from the environment, then the .env file named by
CFGD_ENV_FILE (default ./.env), then defaults. See docs/cli.md.`,
		Version: versionText(buildinfo.Read()),
		// A runnable root with Args of its own reports an unknown
		// command with one line and exit code 2 (see commandArgs).
		Args:                       commandArgs,
		RunE:                       needCommand,
		SuggestionsMinimumDistance: 2,
		SilenceErrors:              true,
		SilenceUsage:               true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("cfgd version {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// In "cfgd apikey revok --id 1" the mistake is the command's name,
		// not the flag it does not take: pflag has collected the name
		// before it stopped.
		if cmd.HasAvailableSubCommands() {
			if nameErr := commandArgs(cmd, cmd.Flags().Args()); nameErr != nil {
				return nameErr
			}
		}
		return &exitError{code: 2, err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
	})
	root.SetHelpCommand(helpCommand())
	root.AddCommand(
		plainCommand("serve", processLog, "run HTTP, gRPC, the event relay, the projections and every module's runners",
			"serve runs every module until interrupted: HTTP and gRPC, the event relay, the\nprojections, reactors and sinks. It applies migrations at start.", serve),
		migrateCommand(),
		plainCommand("worker", processLog, "run a task worker process (TASKS__* settings)",
			"worker runs one task worker process on the queues of TASKS__QUEUES until interrupted.", runWorker),
		plainCommand("broker", processLog, "run the embedded Kafka broker alone for serve, workers and the CLI to share",
			"broker runs the embedded Kafka broker alone on KAFKA__EMBEDDED_ADDR, with its log and\nlogin file in KAFKA__DATA_DIR (KAFKA__BROKERS is ignored). serve, workers and the\nCLI reach it through KAFKA__BROKERS and the KAFKA__SASL_* login of its client.properties.", broker),
		taskCommand(),
		userCommand(),
		deadlettersCommand(),
		replayCommand(),
		apikeyCommand(),
		keysCommand(),
		configCommand(),
		checkCommand(),
	)
	// Made here rather than inside Execute so that it suggests like every
	// other command with sub-commands.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			asParent(c)
		}
	}
	return root
}

// plainCommand is a command without flags or arguments that runs fn once
// the settings are read, logging in style.
func plainCommand(name string, style logStyle, short, long string, fn func(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Long:  long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWithSettings(cmd.Context(), cmd.ErrOrStderr(), style, func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return fn(ctx, log, app, cmd.OutOrStdout())
			})
		},
	}
}

// parentCommand is a command that only holds sub-commands.
func parentCommand(name, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: name, Short: short}
	c.AddCommand(subs...)
	return asParent(c)
}

// asParent makes c report an unknown sub-command with suggestions and
// exit code 2. cobra suggests only in the root's own legacy check, and a
// command that cannot run shows its help (exit 0) before checking its
// arguments, so c gets Args and RunE of its own.
func asParent(c *cobra.Command) *cobra.Command {
	c.Args = commandArgs
	c.RunE = needCommand
	c.SuggestionsMinimumDistance = 2
	return c
}

// commandArgs accepts no argument (needCommand then shows the usage) or,
// below the root, the old spelling "help" (cfgd apikey help); any other
// argument is an unknown sub-command.
func commandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || (cmd.HasParent() && len(args) == 1 && args[0] == "help") {
		return nil
	}
	return &exitError{code: 2, err: unknownCommand(cmd, args[0])}
}

// unknownCommand says in one line that name is not a sub-command of cmd,
// with the nearest names.
func unknownCommand(cmd *cobra.Command, name string) error {
	what := "command"
	if cmd.HasParent() {
		what = cmd.Name() + " command"
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		return fmt.Errorf("unknown %s %q; did you mean %s?", what, name, `"`+strings.Join(s, `" or "`)+`"`)
	}
	return fmt.Errorf("unknown %s %q (see %s --help)", what, name, cmd.CommandPath())
}

// needCommand runs a command that only holds sub-commands: its usage on
// stderr and exit code 2, or its help for "help".
func needCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 1 {
		return cmd.Help()
	}
	fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
	return &exitError{code: 2}
}

// noArgs rejects positional arguments with exit code 2.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", commandName(cmd), args)}
	}
	return nil
}

// commandName is cmd's path without the program name: "apikey create".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// helpCommand replaces cobra's, which exits the process on a failed write
// and lists the root's usage for an unknown topic; this one returns its
// error and suggests like the commands do.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if len(rest) > 0 {
				return &exitError{code: 2, err: unknownCommand(cmd, rest[0])}
			}
			// Execute adds these only to the command it runs.
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// respell rewrites the single-dash long flags of the standard flag
// package, which cfgd parsed with before (-name x, -all), to the double
// dash pflag reads, and says so on stderr; the flag's value is never
// printed. Single letters stay: they are shorthands (-h).
func respell(root *cobra.Command, args []string, stderr io.Writer) []string {
	out := append([]string{}, args...) // never nil: cobra reads os.Args for nil
	cmd, _, err := root.Find(args)
	if err != nil {
		return out
	}
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' {
			continue
		}
		name, _, withValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := cmd.Flags().Lookup(name)
		if f == nil && name != "help" { // help is added at Execute
			continue
		}
		if a[1] != '-' {
			out[i] = "-" + a
			fmt.Fprintf(stderr, "cfgd: -%s is now spelled --%s\n", name, name)
		}
		if !withValue && f != nil && f.NoOptDefVal == "" {
			i++ // its value, which may start with a dash
		}
	}
	return out
}

// versionText is what --version prints after "cfgd version ": the
// release, then the commit and its time the toolchain stamped ("unknown"
// where it stamped nothing: go run, -buildvcs=false, no git checkout).
func versionText(in buildinfo.Info) string {
	commit := in.Commit
	if in.Modified && commit != buildinfo.Unknown {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s\ncommit %s\ndate   %s", in.Version, commit, in.Date)
}
