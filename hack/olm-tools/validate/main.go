// olm-validate checks an OLM registry+v1 bundle directory with OLM's own validation library
// (github.com/operator-framework/api): the default bundle validators plus the optional
// `suite=operatorframework` ones, as `operator-sdk bundle validate DIR --select-optional
// suite=operatorframework` runs them, and the annotations/kind checks that operator-sdk takes
// from operator-registry. Any error OR warning makes it exit 1; every message is printed.
//
//	olm-validate DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	"sigs.k8s.io/yaml"
)

// The validators of `--select-optional suite=operatorframework` (operator-sdk
// internal/cmd/operator-sdk/bundle/validate/optional.go).
var suiteOperatorFramework = map[string]interfaces.Validator{
	"operatorhubv2":         validation.OperatorHubV2Validator,
	"capabilities":          validation.StandardCapabilitiesValidator,
	"categories":            validation.StandardCategoriesValidator,
	"alpha-deprecated-apis": validation.AlphaDeprecatedAPIsValidator,
	"good-practices":        validation.GoodPracticesValidator,
}

// Kinds a registry+v1 bundle may carry besides the CSV and CRDs (operator-registry
// pkg/lib/bundle/supported_resources.go).
var supportedKinds = map[string]bool{
	"ClusterServiceVersion": true, "CustomResourceDefinition": true, "Secret": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "ConfigMap": true, "ServiceAccount": true,
	"Service": true, "Role": true, "RoleBinding": true, "PrometheusRule": true,
	"ServiceMonitor": true, "PodDisruptionBudget": true, "PriorityClass": true,
	"VerticalPodAutoscaler": true, "ConsoleYAMLSample": true, "ConsoleQuickStart": true,
	"ConsoleCLIDownload": true, "ConsoleLink": true,
}

type finding struct {
	level, source, text string
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: olm-validate BUNDLE_DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	var found []finding
	add := func(level, source, text string) { found = append(found, finding{level, source, text}) }

	for _, e := range checkAnnotations(dir) {
		add("ERROR", "annotations", e)
	}
	for _, e := range checkKinds(filepath.Join(dir, "manifests")) {
		add("ERROR", "bundle-objects", e)
	}

	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		add("ERROR", "load", fmt.Sprintf("cannot load the bundle in %s: %v", dir, err))
		report(dir, found)
		return
	}
	objs := bundle.ObjectsToValidate()
	collect := func(source string, results []errors.ManifestResult) {
		for _, r := range results {
			for _, e := range r.Errors {
				add("ERROR", source, fmt.Sprintf("%s: %s", r.Name, e.Error()))
			}
			for _, w := range r.Warnings {
				add("WARNING", source, fmt.Sprintf("%s: %s", r.Name, w.Error()))
			}
		}
	}
	collect("default", validation.DefaultBundleValidators.WithValidators(validation.ObjectValidator).Validate(objs...))
	names := make([]string, 0, len(suiteOperatorFramework))
	for n := range suiteOperatorFramework {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		// The optional validators read their options from a map among the objects.
		collect(n, suiteOperatorFramework[n].Validate(append(objs, map[string]string{})...))
	}
	report(dir, found)
}

func report(dir string, found []finding) {
	for _, f := range found {
		fmt.Printf("%s [%s] %s\n", f.level, f.source, f.text)
	}
	if len(found) > 0 {
		fmt.Printf("%s: %d problem(s); every error and warning must be fixed\n", dir, len(found))
		os.Exit(1)
	}
	fmt.Printf("%s: valid (default validators and suite=operatorframework: no errors, no warnings)\n", dir)
}

// checkAnnotations is operator-registry's format check of metadata/annotations.yaml.
func checkAnnotations(dir string) []string {
	path := filepath.Join(dir, "metadata", "annotations.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	var file struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		return []string{fmt.Sprintf("%s is not YAML: %v", path, err)}
	}
	var errs []string
	want := map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1": "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":  "metadata/",
		"operators.operatorframework.io.bundle.package.v1":   "",
		"operators.operatorframework.io.bundle.channels.v1":  "",
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := file.Annotations[k]
		switch {
		case !ok || strings.TrimSpace(v) == "":
			errs = append(errs, fmt.Sprintf("%s: annotation %s is missing or empty", path, k))
		case want[k] != "" && v != want[k]:
			errs = append(errs, fmt.Sprintf("%s: annotation %s is %q, expected %q", path, k, v, want[k]))
		}
	}
	if v, ok := file.Annotations["operators.operatorframework.io.bundle.channel.default.v1"]; ok && strings.TrimSpace(v) == "" {
		errs = append(errs, fmt.Sprintf("%s: the default channel annotation is empty", path))
	}
	return errs
}

// checkKinds rejects manifests whose kind a registry+v1 bundle may not carry.
func checkKinds(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{fmt.Sprintf("cannot read %s: %v", dir, err)}
	}
	var errs []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("cannot read %s: %v", path, err))
			continue
		}
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &obj); err != nil || obj.Kind == "" {
			errs = append(errs, fmt.Sprintf("%s is not one Kubernetes object", path))
			continue
		}
		if !supportedKinds[obj.Kind] {
			errs = append(errs, fmt.Sprintf("%s: kind %s is not supported in a registry+v1 bundle", path, obj.Kind))
		}
	}
	return errs
}
