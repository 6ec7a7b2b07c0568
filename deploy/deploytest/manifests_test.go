package deploytest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

// The manifests are checked offline: this machine (and CI) has no container
// engine. Where kubectl or docker compose is installed, their own
// validation runs as well.

// obj is a decoded YAML mapping.
type obj = map[string]any

// decodeAll parses every YAML document in path.
func decodeAll(t *testing.T, path string) []obj {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []obj
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d obj
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// at walks a path of keys and indexes through decoded YAML.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }

func list(v any) []any { l, _ := v.([]any); return l }

// subcommands are the `jetway` subcommands, read from cmd/jetway's sources
// so a manifest naming one that does not exist fails here.
func subcommands(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../cmd/jetway/*.go")
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile(`Use:\s+"([a-z-]+)`)
	var cmds []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllSubmatch(data, -1) {
			cmds = append(cmds, string(m[1]))
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no subcommands found in cmd/jetway")
	}
	return cmds
}

// natsUser is the user a NATS_URL value logs in as ("tls://runner:…@…"),
// or "" when the URL carries no credentials.
func natsUser(url string) string {
	rest, ok := strings.CutPrefix(url, "tls://")
	if !ok {
		return ""
	}
	cred, _, ok := strings.Cut(rest, "@")
	if !ok {
		return ""
	}
	user, _, _ := strings.Cut(cred, ":")
	return user
}

func TestCompose_file_is_complete_and_consistent(t *testing.T) {
	doc := decodeAll(t, "../docker-compose.yml")[0]
	services, _ := doc["services"].(obj)
	want := []string{"dispatcher", "jobs-1", "nats-1", "nats-2", "nats-3", "notifier", "provision", "runner-1", "runner-2", "spreader"}
	var got []string
	for name := range services {
		got = append(got, name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("compose services = %v, want %v", got, want)
	}
	cmds := subcommands(t)
	wantUser := map[string]string{"dispatcher": "dispatcher", "runner-1": "runner", "runner-2": "runner", "jobs-1": "jobs", "notifier": "notifier"}
	for name, user := range wantUser {
		svc := services[name]
		if c := str(at(svc, "command", 0)); !slices.Contains(cmds, c) {
			t.Errorf("%s runs `jetway %s`, which is not a subcommand (have %v)", name, c, cmds)
		}
		if u := natsUser(str(at(svc, "environment", "NATS_URL"))); u != user {
			t.Errorf("%s connects to NATS as %q, want %q", name, u, user)
		}
		if str(at(svc, "environment", "NATS_CA")) == "" {
			t.Errorf("%s has no NATS_CA: it could not verify the servers", name)
		}
		if str(at(svc, "depends_on", "provision", "condition")) != "service_completed_successfully" {
			t.Errorf("%s does not wait for provisioning", name)
		}
	}
	if str(at(services["provision"], "environment", "NATS_USER")) != "admin" {
		t.Error("provision does not run as admin")
	}
	checkProvisionArgs(t, "compose provision", list(at(services["provision"], "entrypoint")))
	checkSpreader(t, "compose spreader", list(at(services["spreader"], "entrypoint")))
	if u := natsUser(str(at(services["spreader"], "environment", "NATS_URL"))); u != "spreader" {
		t.Errorf("the spreader connects to NATS as %q, want spreader", u)
	}
	if str(at(services["spreader"], "depends_on", "provision", "condition")) != "service_completed_successfully" {
		t.Error("the spreader does not wait for provisioning")
	}
	if !slices.ContainsFunc(list(at(services["jobs-1"], "volumes")), func(v any) bool {
		return strings.HasPrefix(str(v), "workspace:")
	}) {
		t.Error("jobs-1 has no workspace volume")
	}
	for i, node := range []string{"nats-1", "nats-2", "nats-3"} {
		conf := str(at(services[node], "command", 1))
		if conf != "node-"+string(rune('1'+i))+".conf" {
			t.Errorf("%s runs config %q", node, conf)
		}
		if _, err := os.Stat(filepath.Join(confDir, conf)); err != nil {
			t.Errorf("%s: %v", node, err)
		}
		if at(services[node], "healthcheck", "test") == nil {
			t.Errorf("%s has no healthcheck, so provisioning could start before the cluster", node)
		}
	}
	for _, v := range []string{"nats-1", "nats-2", "nats-3", "workspace"} {
		if _, ok := at(doc, "volumes").(obj)[v]; !ok {
			t.Errorf("volume %s is used but not declared", v)
		}
	}

	if _, err := exec.LookPath("docker"); err == nil {
		if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err == nil {
			cmd := exec.Command("docker", "compose", "-f", "../docker-compose.yml", "config", "--quiet")
			cmd.Env = append(os.Environ(), "NATS_PASSWORD_ADMIN=x", "JETWAY_TOKENS=t:acme")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("docker compose config: %v\n%s", err, out)
			}
		} else {
			t.Logf("docker compose not installed (%s); structural checks only", bytes.TrimSpace(out))
		}
	}
}

func TestDockerfile_builds_static_non_root_images(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{
		"FROM golang:${GO_VERSION} AS build", "CGO_ENABLED=0", "./cmd/jetway", "./deploy/provision",
		"AS jobs", "AS service", "distroless/static", "USER 65532", "USER 10001",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ignore), "deploy/secrets") {
		t.Error(".dockerignore does not keep deploy/secrets out of the build context")
	}
}

func TestKubernetes_manifests_are_complete_and_consistent(t *testing.T) {
	kust := decodeAll(t, "../k8s/kustomization.yaml")[0]
	var docs []obj
	for _, r := range list(kust["resources"]) {
		docs = append(docs, decodeAll(t, filepath.Join("../k8s", str(r)))...)
	}
	cmds := subcommands(t)
	kinds := map[string]obj{}
	podLabels := map[string]obj{} // component -> pod template labels
	for _, d := range docs {
		kind, name := str(d["kind"]), str(at(d, "metadata", "name"))
		kinds[kind+"/"+name] = d
		spec := at(d, "spec", "template", "spec")
		if spec == nil {
			continue
		}
		if labels, ok := at(d, "spec", "template", "metadata", "labels").(obj); ok {
			podLabels[str(labels["app.kubernetes.io/component"])] = labels
		}
		if at(spec, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s/%s may run as root", kind, name)
		}
		for _, c := range list(at(spec, "containers")) {
			cname := str(at(c, "name"))
			if at(c, "resources", "requests") == nil || at(c, "resources", "limits") == nil {
				t.Errorf("%s/%s container %s lacks resource requests or limits", kind, name, cname)
			}
			if a := str(at(c, "args", 0)); a != "" && !slices.Contains(cmds, a) {
				t.Errorf("%s/%s runs `jetway %s`, not a subcommand", kind, name, a)
			}
			// NATS_URL's user and the password's secret must agree.
			var urlUser, envUser, key, secretName string
			for _, e := range list(at(c, "env")) {
				switch str(at(e, "name")) {
				case "NATS_URL":
					urlUser = natsUser(str(at(e, "value")))
				case "NATS_USER":
					envUser = str(at(e, "value"))
				case "NATS_PASSWORD":
					key = str(at(e, "valueFrom", "secretKeyRef", "key"))
					secretName = str(at(e, "valueFrom", "secretKeyRef", "name"))
				}
			}
			user := cmp.Or(urlUser, envUser)
			if urlUser != "" && envUser != "" && urlUser != envUser {
				t.Errorf("%s/%s: NATS_URL user %q, NATS_USER %q", kind, name, urlUser, envUser)
			}
			if user == "" || secretName != "jetway-nats-"+user || key != "password" {
				t.Errorf("%s/%s logs in as %q with secret %q key %q, want jetway-nats-%s key password", kind, name, user, secretName, key, user)
			}
			checkOwnSecretsOnly(t, kind+"/"+name, user, c, at(spec, "volumes"))
		}
	}
	for _, want := range []string{
		"Deployment/dispatcher", "Deployment/runner", "Deployment/notifier", "StatefulSet/jobs",
		"PodDisruptionBudget/runner", "Service/dispatcher", "Service/jobs", "ConfigMap/jetway-config", "Job/jetway-provision",
		"Deployment/spreader",
	} {
		if kinds[want] == nil {
			t.Errorf("no %s", want)
		}
	}
	disp := at(kinds["Deployment/dispatcher"], "spec", "template", "spec", "containers", 0)
	if str(at(disp, "readinessProbe", "httpGet", "path")) != "/readyz" || str(at(disp, "livenessProbe", "httpGet", "path")) != "/healthz" {
		t.Error("dispatcher probes are not /readyz (readiness) and /healthz (liveness)")
	}
	jobs := kinds["StatefulSet/jobs"]
	claim := str(at(jobs, "spec", "volumeClaimTemplates", 0, "metadata", "name"))
	mounted := slices.ContainsFunc(list(at(jobs, "spec", "template", "spec", "containers", 0, "volumeMounts")), func(m any) bool {
		return str(at(m, "name")) == claim
	})
	if claim == "" || !mounted {
		t.Errorf("jobs StatefulSet: claim template %q is not mounted", claim)
	}
	if at(kinds["Job/jetway-provision"], "spec", "template", "spec", "containers", 0, "env", 0, "value") != "admin" {
		t.Error("the provision Job does not run as the admin user")
	}
	checkProvisionArgs(t, "Job/jetway-provision", list(at(kinds["Job/jetway-provision"], "spec", "template", "spec", "containers", 0, "command")))
	checkSpreader(t, "Deployment/spreader", list(at(kinds["Deployment/spreader"], "spec", "template", "spec", "containers", 0, "command")))
	if r := at(kinds["Deployment/spreader"], "spec", "replicas"); r != 1 {
		t.Errorf("Deployment/spreader has %v replicas, want 1: two would move the same leaders against each other", r)
	}
	// Every selector picks the pods it is meant for.
	for _, ref := range []string{"PodDisruptionBudget/runner", "Service/dispatcher", "Service/jobs", "Service/notifier"} {
		sel, _ := at(kinds[ref], "spec", "selector").(obj)
		if m, ok := sel["matchLabels"].(obj); ok {
			sel = m
		}
		comp := str(sel["app.kubernetes.io/component"])
		labels := podLabels[comp]
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%v, which no pod template carries", ref, k, v)
			}
		}
	}

	values := decodeAll(t, "../k8s/nats-values.yaml")[0]
	if at(values, "config", "cluster", "replicas") != 3 || at(values, "config", "jetstream", "enabled") != true ||
		at(values, "config", "nats", "tls", "enabled") != true || at(values, "config", "cluster", "tls", "enabled") != true {
		t.Error("nats-values.yaml: want 3 replicas, JetStream, and TLS for clients and routes")
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not installed; structural checks only")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", "../k8s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	if n := len(regexp.MustCompile(`(?m)^kind: `).FindAll(out, -1)); n != len(docs) {
		t.Errorf("kubectl kustomize rendered %d objects, want %d", n, len(docs))
	}
}

// checkOwnSecretsOnly fails when a container is handed any secret but its
// own: of the NATS passwords only its user's Secret, the bearer tokens only
// in the dispatcher, the model keys only in the runner, and of the server's
// TLS Secret only the CA certificate (never the server's key).
func checkOwnSecretsOnly(t *testing.T, what, user string, c any, volumes any) {
	t.Helper()
	allowed := map[string]bool{"jetway-nats-" + user: true}
	switch user {
	case "dispatcher":
		allowed["jetway-tokens"] = true
	case "runner":
		allowed["jetway-model"] = true
	}
	var refs []string
	for _, e := range list(at(c, "env")) {
		if n := str(at(e, "valueFrom", "secretKeyRef", "name")); n != "" {
			refs = append(refs, n)
		}
	}
	for _, e := range list(at(c, "envFrom")) {
		if n := str(at(e, "secretRef", "name")); n != "" {
			refs = append(refs, n)
		}
	}
	for _, r := range refs {
		if !allowed[r] {
			t.Errorf("%s (NATS user %s) is handed Secret %s, which is not its own", what, user, r)
		}
	}
	mounted := map[string]bool{}
	for _, m := range list(at(c, "volumeMounts")) {
		mounted[str(at(m, "name"))] = true
	}
	for _, v := range list(volumes) {
		sec := str(at(v, "secret", "secretName"))
		if sec == "" || !mounted[str(at(v, "name"))] {
			continue
		}
		if sec != "nats-server-tls" {
			if !allowed[sec] {
				t.Errorf("%s mounts Secret %s, which is not its own", what, sec)
			}
			continue
		}
		items := list(at(v, "secret", "items"))
		if len(items) == 0 {
			t.Errorf("%s mounts all of nats-server-tls (the server's key included); mount only ca.crt", what)
		}
		for _, it := range items {
			if k := str(at(it, "key")); k != "ca.crt" {
				t.Errorf("%s mounts %s of nats-server-tls; a client needs only ca.crt", what, k)
			}
		}
	}
}

func TestCompose_hands_each_container_only_its_own_secret(t *testing.T) {
	doc := decodeAll(t, "../docker-compose.yml")[0]
	services, _ := doc["services"].(obj)
	passwordRef := regexp.MustCompile(`\$\{NATS_PASSWORD_([A-Z_]+)`)
	own := map[string]string{"dispatcher": "DISPATCHER", "runner-1": "RUNNER", "runner-2": "RUNNER",
		"jobs-1": "JOBS", "notifier": "NOTIFIER", "provision": "ADMIN", "spreader": "SPREADER"}
	// Never a tenant's nkey seed (secrets/tenants/): the servers need the
	// tenant accounts' public keys only, in tenants.conf.
	nodeFiles := []string{"passwords.conf", "tenants.conf", "server.pem", "server-key.pem", "ca.pem"}
	for name, svc := range services {
		if at(svc, "env_file") != nil {
			t.Errorf("%s reads an env_file: every variable in it (passwords included) would reach the container", name)
		}
		env, _ := at(svc, "environment").(obj)
		for k, v := range env {
			for _, m := range passwordRef.FindAllStringSubmatch(str(v), -1) {
				if m[1] != own[name] {
					t.Errorf("%s: %s carries NATS_PASSWORD_%s, not its own (%q)", name, k, m[1], own[name])
				}
			}
		}
		for _, v := range list(at(svc, "volumes")) {
			src, dst, _ := strings.Cut(str(v), ":")
			if !strings.HasPrefix(src, "./secrets") {
				continue
			}
			file := strings.TrimPrefix(strings.TrimPrefix(src, "./secrets"), "/")
			switch {
			case file == "":
				t.Errorf("%s mounts the whole secrets directory (%s), users.env and every password included", name, dst)
			case strings.HasPrefix(name, "nats-"):
				if !slices.Contains(nodeFiles, file) {
					t.Errorf("%s mounts secrets/%s; a node needs only %v", name, file, nodeFiles)
				}
			case file != "ca.pem":
				t.Errorf("%s mounts secrets/%s; a service needs only ca.pem", name, file)
			}
		}
	}
}

// includedSecrets are the files of secrets/ the deploy configuration
// includes: a node that lacks one does not start.
func includedSecrets(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(confDir, "*.conf"))
	if err != nil {
		t.Fatal(err)
	}
	include := regexp.MustCompile(`(?m)^\s*include\s+"secrets/([^"]+)"`)
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range include.FindAllSubmatch(data, -1) {
			out = append(out, string(m[1]))
		}
	}
	if !slices.Contains(out, "tenants.conf") || !slices.Contains(out, "passwords.conf") {
		t.Fatalf("deploy/nats includes %v from secrets/, want passwords.conf and tenants.conf", out)
	}
	return out
}

func TestEvery_node_is_given_every_secrets_file_the_configuration_includes(t *testing.T) {
	want := includedSecrets(t)
	services, _ := decodeAll(t, "../docker-compose.yml")[0]["services"].(obj)
	for _, node := range []string{"nats-1", "nats-2", "nats-3"} {
		var mounted []string
		for _, v := range list(at(services[node], "volumes")) {
			src, dst, _ := strings.Cut(str(v), ":")
			if file, ok := strings.CutPrefix(src, "./secrets/"); ok {
				if d, _, _ := strings.Cut(dst, ":"); d != "/etc/nats/secrets/"+file {
					t.Errorf("compose %s mounts secrets/%s at %s, not where accounts.conf includes it", node, file, d)
				}
				mounted = append(mounted, file)
			}
		}
		for _, f := range want {
			if !slices.Contains(mounted, f) {
				t.Errorf("compose %s does not mount secrets/%s, which the configuration includes", node, f)
			}
		}
	}
	values := decodeAll(t, "../k8s/nats-values.yaml")[0]
	var items []string
	for _, p := range list(at(values, "podTemplate", "patch")) {
		for _, it := range list(at(p, "value", "secret", "items")) {
			items = append(items, str(at(it, "path")))
		}
	}
	for _, f := range want {
		if !slices.Contains(items, "secrets/"+f) {
			t.Errorf("nats-values.yaml: Secret nats-accounts has no item at secrets/%s (have %v)", f, items)
		}
	}
	script, err := os.ReadFile("../../scripts/containers.sh")
	if err != nil {
		t.Fatal(err)
	}
	loop := regexp.MustCompile(`for f in ([^;]+); do`).FindSubmatch(script)
	if loop == nil {
		t.Fatal("scripts/containers.sh: no `for f in …; do` loop staging the nodes' secrets")
	}
	for _, f := range want {
		if !slices.Contains(strings.Fields(string(loop[1])), f) {
			t.Errorf("scripts/containers.sh stages %s for the nodes, not %s", loop[1], f)
		}
	}
}

func TestCluster_script_hands_each_service_only_its_own_password(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	users := []string{"admin", "dispatcher", "runner", "jobs", "notifier", "spreader"}
	pw := func(u string) string { return "pw-of-" + u + "-7f3a" }
	var env strings.Builder
	for _, u := range users {
		env.WriteString("NATS_PASSWORD_" + strings.ToUpper(u) + "=" + pw(u) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "users.env"), []byte(env.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		cmd := exec.Command("bash", "../../scripts/cluster.sh", "service-env", u)
		// A password already in the caller's environment must not leak either.
		cmd.Env = append(os.Environ(), "JETWAY_SECRETS="+dir, "NATS_PASSWORD_ADMIN="+pw("admin"),
			"NATS_PASSWORD="+pw("admin"), "NATS_USER=admin")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cluster.sh service-env %s: %v\n%s", u, err, out)
		}
		got := string(out)
		if !strings.Contains(got, "NATS_URL=tls://"+u+":"+pw(u)+"@") {
			t.Errorf("%s: no NATS_URL with its own password in\n%s", u, got)
		}
		for _, other := range users {
			if other != u && strings.Contains(got, pw(other)) {
				t.Errorf("%s's environment holds %s's password", u, other)
			}
		}
		for _, line := range strings.Split(got, "\n") {
			if strings.HasPrefix(line, "NATS_PASSWORD") || strings.HasPrefix(line, "NATS_USER=") {
				t.Errorf("%s's environment has %q", u, line)
			}
		}
	}
}

// checkProvisionArgs holds a deployment's jetway-provision command to the
// layout the permissions in deploy/nats/accounts.conf are written for:
// three replicas, deployShards shards (the permissions name each shard),
// and the servers' partition count (no -partitions: the mapping decides).
func checkProvisionArgs(t *testing.T, where string, cmd []any) {
	t.Helper()
	var args []string
	for _, a := range cmd {
		args = append(args, str(a))
	}
	flagValue := func(name string) (string, bool) {
		i := slices.Index(args, "-"+name)
		if i < 0 || i+1 >= len(args) {
			return "", false
		}
		return args[i+1], true
	}
	if len(args) == 0 || filepath.Base(args[0]) != "jetway-provision" {
		t.Errorf("%s runs %v, want jetway-provision", where, args)
		return
	}
	if v, _ := flagValue("replicas"); v != "3" {
		t.Errorf("%s: -replicas %q, want 3 (args %v)", where, v, args)
	}
	if v, _ := flagValue("shards"); v != strconv.Itoa(deployShards) {
		t.Errorf("%s: -shards %q, want %d, the shards accounts.conf's permissions name (args %v)", where, v, deployShards, args)
	}
	if v, ok := flagValue("partitions"); ok && v != strconv.Itoa(deployPartitions) && v != "0" {
		t.Errorf("%s: -partitions %s, but the servers map %d (accounts.conf): provisioning would refuse", where, v, deployPartitions)
	}
}

// checkSpreader holds a deployment's spreader to what its user may do:
// jetway-provision keeping the leaders spread and provisioning nothing
// (the spreader user could not), at an interval it accepts.
func checkSpreader(t *testing.T, where string, cmd []any) {
	t.Helper()
	var args []string
	for _, a := range cmd {
		args = append(args, str(a))
	}
	if len(args) == 0 || filepath.Base(args[0]) != "jetway-provision" || !slices.Contains(args, "-spread-only") {
		t.Errorf("%s runs %v, want jetway-provision -spread-only", where, args)
		return
	}
	i := slices.Index(args, "-keep-spread")
	if i < 0 || i+1 >= len(args) {
		t.Errorf("%s: no -keep-spread in %v: it would spread once and exit", where, args)
		return
	}
	if d, err := time.ParseDuration(args[i+1]); err != nil || d < time.Second {
		t.Errorf("%s: -keep-spread %q, want an interval of 1s or more", where, args[i+1])
	}
}

// TestCluster_script_status_and_down_stop_what_up_started runs
// `scripts/cluster.sh status` and `down` against a state directory whose
// pids are real processes, as `up` leaves them: status names each as
// running, down stops every one (services before nodes) and forgets it,
// and status then says nothing runs.
func TestCluster_script_status_and_down_stop_what_up_started(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	state := t.TempDir()
	if err := os.Mkdir(filepath.Join(state, "pids"), 0o700); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*exec.Cmd{}
	for _, name := range []string{"node-1", "node-2", "node-3", "spreader", "runner-1"} {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		procs[name] = cmd
		if err := os.WriteFile(filepath.Join(state, "pids", name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := func(verb string) string {
		t.Helper()
		cmd := exec.Command("bash", "../../scripts/cluster.sh", verb)
		cmd.Env = append(os.Environ(), "JETWAY_CLUSTER_STATE="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cluster.sh %s: %v\n%s", verb, err, out)
		}
		return string(out)
	}
	out := script("status")
	for name, cmd := range procs {
		if want := fmt.Sprintf("%s running (pid %d)", name, cmd.Process.Pid); !strings.Contains(out, want) {
			t.Errorf("cluster.sh status does not say %q:\n%s", want, out)
		}
	}
	out = script("down")
	for name, cmd := range procs {
		if want := fmt.Sprintf("stopped %s (pid %d)", name, cmd.Process.Pid); !strings.Contains(out, want) {
			t.Errorf("cluster.sh down does not say %q:\n%s", want, out)
		}
		if _, err := os.Stat(filepath.Join(state, "pids", name+".pid")); !os.IsNotExist(err) {
			t.Errorf("cluster.sh down left %s's pid file (%v)", name, err)
		}
	}
	if strings.Index(out, "stopped runner-1") > strings.Index(out, "stopped node-1") {
		t.Errorf("cluster.sh down stopped a node before a service:\n%s", out)
	}
	if out := script("status"); !strings.Contains(out, "nothing running") {
		t.Errorf("cluster.sh status after down: %s", out)
	}
}
