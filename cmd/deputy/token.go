package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/tokenreview"
)

// newTokenCommand returns `deputy token`: project tokens (package
// tokenreview).
func newTokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Issue deputy project tokens and create their signing keys",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCommand(), newTokenKeygenCommand())
	return cmd
}

type tokenCreateFlags struct {
	configFile string
	project    string
	role       string
	ttl        time.Duration
	audiences  []string
	signingKey string
	policy     []string
	output     string
}

func newTokenCreateCommand() *cobra.Command {
	var f tokenCreateFlags
	cmd := &cobra.Command{
		Use:   "create --project NAMESPACE/NAME --role ROLE [--ttl 24h] [--config FILE | --signing-key FILE] [--audience A]... [--policy PATH]... [-o json]",
		Short: "Issue a project token for a role of a deputy.dev AppProject",
		Long: `Issue a project token: an ES256 JWT signed with deputy's project token key,
for the user deputy:project:NAMESPACE/NAME:ROLE with the single group
deputy:project:NAMESPACE/NAME. The role's spec.roles[].groups are never
carried (in Argo CD they are the OIDC groups granted the role); bind RBAC to
that user or group. The project and the role are looked up each time the
token is used, so they must still exist then; it expires after --ttl.

The token is printed on stdout (alone, for TOKEN=$(deputy token create ...)),
a summary with its ID (jti) on stderr: to revoke the token, add that ID to
the file authentication.projectTokens.revocationFile names.

The signing key, issuer and default audiences come from --config (its
authentication section; see docs/authentication.md); --signing-key overrides
the key. With --policy (or a --config whose policy.paths is set) the project
and role are checked before the token is issued.

A project token acts only on Applications of its own project, and only as far
as deputy's policy allows its user or group.`,
		Example: `  deputy token keygen --private-key key.pem --public-key key.pub
  deputy token create --project team-a/alpha --role deployer --ttl 24h --signing-key key.pem
  DEPUTY_TOKEN=$(deputy token create --config deputy.yaml --project team-a/alpha --role ci --ttl 1h) deputy sync team-a/web`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenCreate(cmd, &f, time.Now())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.configFile, "config", "", "DeputyConfiguration file: authentication.projectTokens (signing key, issuer), authentication.apiAudiences, policy.paths")
	fs.StringVar(&f.project, "project", "", "the deputy.dev AppProject, NAMESPACE/NAME")
	fs.StringVar(&f.role, "role", "", "a role of the AppProject (spec.roles[].name)")
	fs.DurationVar(&f.ttl, "ttl", 24*time.Hour, "lifetime of the token")
	fs.StringArrayVar(&f.audiences, "audience", nil, "audience (aud) of the token; repeatable (default: authentication.apiAudiences, "+config.DefaultAPIAudience+")")
	fs.StringVar(&f.signingKey, "signing-key", "", "PEM EC P-256 private key to sign with (default: authentication.projectTokens.signingKeyFile of --config)")
	fs.StringArrayVar(&f.policy, "policy", nil, "policy file or directory whose AppProjects must contain the project and role; repeatable")
	fs.StringVarP(&f.output, "output", "o", "", `"json": print the token with its ID, user, audiences and expiry as JSON`)
	_ = cmd.MarkFlagRequired("project")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

// tokenCreateOutput is the -o json output.
type tokenCreateOutput struct {
	Token     string    `json:"token"`
	ID        string    `json:"id"`
	User      string    `json:"user"`
	Audiences []string  `json:"audiences"`
	KeyID     string    `json:"keyID"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func runTokenCreate(cmd *cobra.Command, f *tokenCreateFlags, now time.Time) error {
	if f.output != "" && f.output != "json" {
		return fmt.Errorf(`--output %q: use -o json, or no -o for the token alone`, f.output)
	}
	ns, name, ok := strings.Cut(f.project, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--project %q: give the deputy.dev AppProject as NAMESPACE/NAME, e.g. --project team-a/alpha", f.project)
	}
	cfg, err := loadConfigFile(f.configFile)
	if err != nil {
		return err
	}
	keyFile := f.signingKey
	if keyFile == "" {
		keyFile = cfg.Authentication.ProjectTokens.SigningKeyFile
	}
	if keyFile == "" {
		return errors.New("no signing key: pass --signing-key FILE, or --config with authentication.projectTokens.signingKeyFile (deputy token keygen creates a key)")
	}
	key, err := tokenreview.LoadSigningKey(keyFile)
	if err != nil {
		return err
	}
	audiences := f.audiences
	if len(audiences) == 0 {
		audiences = cfg.Authentication.APIAudiences
	}

	paths := f.policy
	if len(paths) == 0 {
		paths = cfg.Policy.Paths
	}
	if len(paths) > 0 {
		snap, what, err := loadPolicyOnce("", paths)
		if err != nil {
			return fmt.Errorf("cannot check the project against %s: %w", what, err)
		}
		p := snap.DeputyAppProject(ns, name)
		if p == nil {
			return fmt.Errorf("%s has no deputy.dev AppProject %s/%s: create it, or fix --project", what, ns, name)
		}
		var roles []string
		found := false
		for _, r := range p.Spec.Roles {
			roles = append(roles, r.Name)
			found = found || r.Name == f.role
		}
		if !found {
			return fmt.Errorf("AppProject %s/%s has no role %q (it has %v): add it to spec.roles, or fix --role", ns, name, f.role, roles)
		}
	} else {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the project and role were not checked (no --policy, and --config has no policy.paths): deputy refuses the token at use if AppProject %s/%s or its role %q does not exist\n", ns, name, f.role)
	}

	token, info, err := tokenreview.IssueProjectToken(key, tokenreview.ProjectTokenRequest{
		Namespace: ns, Name: name, Role: f.role, TTL: f.ttl, Audiences: audiences, Issuer: cfg.Authentication.ProjectTokens.Issuer,
	}, now)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(tokenCreateOutput{Token: token, ID: info.ID, User: info.UserName, Audiences: info.Audiences, KeyID: info.KeyID, ExpiresAt: info.ExpiresAt.UTC()})
	}
	fmt.Fprintln(out, token)
	fmt.Fprintf(cmd.ErrOrStderr(), "issued project token id=%s user=%s audiences=%v expires=%s key=%s\nrevoke it by adding %s to authentication.projectTokens.revocationFile\n",
		info.ID, info.UserName, info.Audiences, info.ExpiresAt.UTC().Format(time.RFC3339), info.KeyID, info.ID)
	return nil
}

func newTokenKeygenCommand() *cobra.Command {
	var (
		privateFile, publicFile string
		force                   bool
	)
	cmd := &cobra.Command{
		Use:   "keygen --private-key FILE --public-key FILE [--force]",
		Short: "Create an EC P-256 key pair for signing and verifying project tokens",
		Long: `Create a new project token signing key (PEM PKCS#8, mode 0600) and its public
key (PEM). Point authentication.projectTokens.signingKeyFile at the private
key. To rotate: create a new pair, list the old public key in
verificationKeyFiles, switch signingKeyFile to the new private key, and remove
the old public key once its tokens have expired.`,
		Example: "  deputy token keygen --private-key /etc/deputy/tokens/key.pem --public-key /etc/deputy/tokens/key.pub",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !force {
				for _, p := range []string{privateFile, publicFile} {
					if _, err := os.Stat(p); err == nil {
						return fmt.Errorf("%s exists: pass --force to replace it (tokens signed with the old key then fail unless its public key stays in verificationKeyFiles)", p)
					}
				}
			}
			key, priv, pub, err := tokenreview.GenerateSigningKey()
			if err != nil {
				return err
			}
			// A new file renamed into place: mode 0600 even when --force
			// replaces a file that was more open, and never through a symlink.
			if err := certs.WriteFileAtomic(privateFile, priv, 0o600); err != nil {
				return fmt.Errorf("failed to write the private key: %w", err)
			}
			if err := certs.WriteFileAtomic(publicFile, pub, 0o644); err != nil {
				return fmt.Errorf("failed to write the public key: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (kid %s)\n", privateFile, publicFile, key.KeyID())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&privateFile, "private-key", "", "file for the private (signing) key")
	fs.StringVar(&publicFile, "public-key", "", "file for the public (verification) key")
	fs.BoolVar(&force, "force", false, "replace existing files")
	_ = cmd.MarkFlagRequired("private-key")
	_ = cmd.MarkFlagRequired("public-key")
	return cmd
}
