package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// PolicyConfigMapKey is the key of the release's policy ConfigMap
// (config/manager/policy.yaml) that holds the policy file.
const PolicyConfigMapKey = "policy.yaml"

// maxPolicyInput bounds what policy validate reads from one file or stdin: a
// policy is kilobytes; a kustomize build of the whole release is well under this.
const maxPolicyInput = 16 << 20

// NewPolicyCommand is `policy`, whose one subcommand validates policy files.
func NewPolicyCommand(displayName string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with the extension's policy file",
	}
	cmd.AddCommand(newPolicyValidateCommand(displayName))
	return cmd
}

func newPolicyValidateCommand(displayName string) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "validate -f FILE [-f FILE]...",
		Short: "Check policy files as the extension would load them, without a cluster",
		Long: `validate reads each file as the extension reads --policy-file, with the same rules
(unknown fields, selectors, gates, CEL expressions, deadlines, ...), and prints every
error it finds, so that a CI pipeline can refuse a policy before it reaches a
cluster: an invalid policy stops the extension from starting.

A file is a policy file, or Kubernetes manifests (one or more YAML documents, such
as the output of kustomize build) in which every ConfigMap with a "` + PolicyConfigMapKey + `" key is
checked; other objects are skipped. "-" reads standard input.

Exit codes: 0 every policy is valid; 1 a file could not be read or holds no policy;
4 a policy is invalid.`,
		Example: fmt.Sprintf(`  %[1]s policy validate -f policy.yaml
  kustomize build config/default | %[1]s policy validate -f -`, displayName),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return errors.New("no file given: -f FILE (or -f - for standard input)")
			}
			return validatePolicyFiles(cmd.InOrStdin(), cmd.OutOrStdout(), files)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, `Policy file or manifests to check ("-": standard input); repeatable.`)
	return cmd
}

// validatePolicyFiles checks every policy in files and reports each on out: the
// source and "valid", or one line per error.
func validatePolicyFiles(stdin io.Reader, out io.Writer, files []string) error {
	invalid := 0
	for _, name := range files {
		data, err := readPolicyInput(stdin, name)
		if err != nil {
			return err
		}
		policies, err := policiesIn(name, data)
		if err != nil {
			return err
		}
		for _, p := range policies {
			if _, err := policy.Parse(p.data); err != nil {
				invalid++
				for _, problem := range policyProblems(err) {
					// A problem's own later lines (a CEL compiler's caret) are indented
					// under it: one entry per problem, each led by its source.
					text := strings.ReplaceAll(strings.TrimRight(problem.Error(), "\n"), "\n", "\n  ")
					if _, werr := fmt.Fprintf(out, "%s: %s\n", p.source, text); werr != nil {
						return werr
					}
				}
				continue
			}
			if _, err := fmt.Fprintf(out, "%s: valid\n", p.source); err != nil {
				return err
			}
		}
	}
	if invalid > 0 {
		return &exitError{code: ExitInvalidPolicy, err: fmt.Errorf("%d invalid %s", invalid, plural(invalid, "policy", "policies"))}
	}
	return nil
}

func readPolicyInput(stdin io.Reader, name string) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("read policy: %w", err)
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPolicyInput+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", name, err)
	}
	if len(data) > maxPolicyInput {
		return nil, fmt.Errorf("read policy %s: larger than %d MiB", name, maxPolicyInput>>20)
	}
	return data, nil
}

// sourcedPolicy is one policy file's content and where it came from.
type sourcedPolicy struct {
	source string
	data   []byte
}

// policiesIn returns the policies of one input: the input itself when it is a
// policy file, else the policy key of every ConfigMap among its manifests.
func policiesIn(name string, data []byte) ([]sourcedPolicy, error) {
	docs, err := yamlDocuments(data)
	if err != nil || !isManifest(docs) {
		// A policy file (policy.Parse reports what is wrong with it).
		return []sourcedPolicy{{source: name, data: data}}, nil
	}
	var out []sourcedPolicy
	for _, doc := range docs {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil || obj.Kind != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err != nil {
			return nil, fmt.Errorf("%s: a ConfigMap that does not decode: %w", name, err)
		}
		if p, ok := cm.Data[PolicyConfigMapKey]; ok {
			out = append(out, sourcedPolicy{source: fmt.Sprintf("%s (ConfigMap %s/%s)", name, cm.Namespace, cm.Name), data: []byte(p)})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: manifests without a ConfigMap holding %q: no policy to check", name, PolicyConfigMapKey)
	}
	return out, nil
}

// yamlDocuments splits a YAML stream into its non-empty documents.
func yamlDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// isManifest says whether the documents are Kubernetes objects (each names its
// apiVersion and kind), not a policy file, which has neither field.
func isManifest(docs [][]byte) bool {
	if len(docs) == 0 {
		return false
	}
	for _, doc := range docs {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if yaml.Unmarshal(doc, &obj) != nil || obj.APIVersion == "" || obj.Kind == "" {
			return false
		}
	}
	return true
}

// policyProblems are the problems policy.Parse found, one error each.
func policyProblems(err error) []error {
	var invalid *policy.InvalidError
	if errors.As(err, &invalid) {
		return invalid.Problems
	}
	return []error{err}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
