package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/events"
)

// scalingDoc is where operators read why every replica needs the same keys.
const scalingDoc = "docs/scaling.md#keys-every-replica-shares"

// logGeneratedKeys says in one line that this start made key files of its
// own: fine for one local replica, wrong for several.
func logGeneratedKeys(log *slog.Logger, paths []string) {
	if len(paths) == 0 {
		return
	}
	log.Warn("generated new keys: every replica must share the JWT, OTP and event signing keys (share AUTH__KEYS_DIR or set them; cfgd keys generate)",
		"files", strings.Join(paths, ","), "see", scalingDoc)
}

// keysCommand is `cfgd keys generate|rotate`.
func keysCommand() *cobra.Command {
	var (
		dir       string
		printOnly bool
	)
	generate := &cobra.Command{
		Use:   "generate [--dir D | --print]",
		Short: "write the keys every replica shares (JWT, OTP, event signing)",
		Long: `generate writes the JWT signing key (of JWT__ALGORITHM), the OTP HMAC key and the
event signing key into the keys directory (--dir, default AUTH__KEYS_DIR), mode 0600,
keeping any that exist; every replica then reads that directory (shared storage).
With --print it writes no file and prints the same keys as settings instead
(JWT__SIGNING_KEY, OTP__HMAC_KEY, EVENTS__SIGNING_KEY) to give every replica.`,
		Example: "  cfgd keys generate --dir /mnt/shared/cfgd-keys\n  cfgd keys generate --print >> replicas.env",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printOnly && cmd.Flags().Changed("dir") {
				return &exitError{code: 2, err: errors.New("--dir and --print: choose one")}
			}
			if cmd.Flags().Changed("dir") && dir == "" {
				return &exitError{code: 2, err: errors.New("--dir: a directory is required")}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(_ context.Context, _ *slog.Logger, app appSettings) error {
				if printOnly {
					return printKeys(app.Signin.JWT.Algorithm, cmd.OutOrStdout())
				}
				return generateKeys(app.Signin.JWT.Algorithm, cmp.Or(dir, app.Signin.KeysDir), cmd.OutOrStdout())
			})
		},
	}
	generate.Flags().StringVar(&dir, "dir", "", "the keys directory (default AUTH__KEYS_DIR)")
	generate.Flags().BoolVar(&printOnly, "print", false, "print the keys as settings instead of writing files")

	var rotateDir string
	rotate := &cobra.Command{
		Use:   "rotate [--dir D]",
		Short: "make a new JWT signing key; older keys keep verifying their tokens",
		Long: `rotate puts a new JWT signing key first in the key file of the keys directory
(--dir, default AUTH__KEYS_DIR). Every running replica verifies the new key from
the first token signed with it that reaches it (a token naming a key it does not
know reads the changed file at once) and reads the file again within
JWT__KEYS_RELOAD (30s by default) anyway; it signs with the key two such intervals after the rotation,
when every replica knows it. The older keys stay to verify the tokens they signed, and a later rotation
drops them once every such token has expired (the longest of JWT__ACCESS_TTL,
JWT__REFRESH_TTL and ADMIN__SESSION_TTL after they stopped signing). With JWT__SIGNING_KEY set,
rotate in the settings instead (see docs/operations.md).`,
		Example: "  cfgd keys rotate --dir /mnt/shared/cfgd-keys",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dir") && rotateDir == "" {
				return &exitError{code: 2, err: errors.New("--dir: a directory is required")}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(_ context.Context, _ *slog.Logger, app appSettings) error {
				if app.Signin.JWT.SigningKey.IsSet() {
					return &exitError{code: 2, err: errors.New("JWT__SIGNING_KEY is set, so the key file is not used: rotate in the settings " +
						"(the old key moves to JWT__VERIFY_KEYS on every replica first, then the new one becomes JWT__SIGNING_KEY; see docs/operations.md)")}
				}
				return rotateKeys(app.Signin, cmp.Or(rotateDir, app.Signin.KeysDir), cmd.OutOrStdout())
			})
		},
	}
	rotate.Flags().StringVar(&rotateDir, "dir", "", "the keys directory (default AUTH__KEYS_DIR)")
	return parentCommand("keys", "generate and rotate the keys every replica shares", generate, rotate)
}

// printKeys prints fresh keys as settings; the operator asked for them on
// standard output, nothing else sees them.
func printKeys(alg string, stdout io.Writer) error {
	var lines []string
	for _, name := range []string{"JWT__SIGNING_KEY", "OTP__HMAC_KEY", "EVENTS__SIGNING_KEY"} {
		a := token.HS256 // 32 random bytes, base64
		if name == "JWT__SIGNING_KEY" {
			a = alg
		}
		k, err := token.NewKeyText(a)
		if err != nil {
			return err
		}
		lines = append(lines, name+"="+k)
	}
	_, err := fmt.Fprintf(stdout, "# Give every replica these settings (JWT__ALGORITHM=%s); see %s\n%s\n", alg, scalingDoc, strings.Join(lines, "\n"))
	return err
}

// generateKeys writes the missing key files in dir and says which it
// wrote and kept; it never prints a key.
func generateKeys(alg, dir string, stdout io.Writer) error {
	var report []string
	path, kid, err := token.GenerateFile(alg, dir)
	switch {
	case errors.Is(err, token.ErrKeyFileExists):
		report = append(report, "kept   "+path)
	case err != nil:
		return err
	default:
		report = append(report, fmt.Sprintf("wrote  %s (%s, kid %s)", path, alg, kid))
	}
	otpPath := filepath.Join(dir, signin.OTPKeyFile)
	if _, created, err := token.LoadOrCreateSecret(otpPath); err != nil {
		return err
	} else if created {
		report = append(report, "wrote  "+otpPath)
	} else {
		report = append(report, "kept   "+otpPath)
	}
	evPath := filepath.Join(dir, eventKeyFile)
	created, err := events.CreateSigningKey(evPath)
	if err != nil {
		return err
	}
	if _, err := events.ReadSigningKey(evPath); err != nil {
		return err
	}
	if created {
		report = append(report, "wrote  "+evPath)
	} else {
		report = append(report, "kept   "+evPath)
	}
	_, err = fmt.Fprintf(stdout, "%s\nEvery replica must read these keys: AUTH__KEYS_DIR=%s on storage they share (or copy the files to each); see %s\n",
		strings.Join(report, "\n"), dir, scalingDoc)
	return err
}

func rotateKeys(cfg signin.Config, dir string, stdout io.Writer) error {
	// A key signs two reload intervals after it is made (token.NewReloading):
	// an old key stops signing that much after the rotation that retired it.
	activation := 2 * cfg.JWT.KeysReload
	now := time.Now()
	r, err := token.Rotate(cfg.JWT.Algorithm, dir, now, cfg.MaxTokenLifetime()+activation)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "new signing key: kid %s in %s\nstill verifying: %s\ndropped (every token they signed has expired): %s\n"+
		"Every running replica reads the file again within %s and signs with the new key from %s.\n",
		r.Kid, r.Path, orNone(r.Kept), orNone(r.Pruned), cfg.JWT.KeysReload, now.Add(activation).UTC().Format(time.RFC3339))
	return err
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
