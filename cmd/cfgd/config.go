package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/cmd/settings"
)

// configCommand prints the effective settings, each with its source.
func configCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "config",
		Short: "print the effective settings, secrets masked, each with its source",
		Long: `config prints every setting with the value cfgd would use and where it comes
from (default, .env or environment); secrets are masked. Variables that look like
cfgd settings but are none (a typo such as POSTGRES__ULR) are listed after them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ld, err := loadSettings()
			if err != nil {
				return err
			}
			if err := printConfig(cmd.OutOrStdout(), ld, asJSON); err != nil {
				return err
			}
			if err := ld.reader.Err(); err != nil {
				return &exitError{code: 2, err: err}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return c
}

type configLine struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Secret bool   `json:"secret,omitempty"`
}

func printConfig(w io.Writer, ld *loaded, asJSON bool) error {
	var lines []configLine
	for _, v := range settings.Current(ld.reader) {
		lines = append(lines, configLine{Name: v.Name, Value: v.Value, Source: ld.src.Origin(v.Name), Secret: v.Secret})
	}
	if asJSON {
		unknown := make([]string, 0, len(ld.unknown))
		for _, u := range ld.unknown {
			unknown = append(unknown, u.String())
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"settings": lines, "unknown": unknown})
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tSOURCE")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Name, l.Value, l.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range ld.unknown {
		fmt.Fprintln(w, "unknown:", u)
	}
	return nil
}

// checkCommand validates the settings, unknown names included, and exits 2
// on any problem.
func checkCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "check the settings (bad values and unknown names) and exit",
		Long: `check reads every setting as serve would, and reports every bad value and every
variable under a cfgd section that is not a setting (with the nearest known name),
one per line; it exits 2 when there is any, 0 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ld, err := loadSettings()
			if err != nil {
				return err
			}
			if err := ld.problems(true); err != nil {
				return &exitError{code: 2, err: err}
			}
			if names := settings.BuiltInURLs(ld.reader); len(names) > 0 {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "settings ok; built-in defaults (local stack, embedded broker) for %s\n", strings.Join(names, ", "))
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "settings ok")
			return err
		},
	}
}
