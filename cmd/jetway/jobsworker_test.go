package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"jetway/services/jobs"
)

// parseJobsWorkerFlags parses args as the jobs worker's flags and applies
// them to a fresh config.
func parseJobsWorkerFlags(t *testing.T, args ...string) (jobs.Config, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	var f jobsWorkerFlags
	addJobsWorkerFlags(cmd, &f, false)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	var cfg jobs.Config
	return cfg, f.apply(&cfg)
}

func TestJobs_worker_flags_default_to_the_safe_limits(t *testing.T) {
	t.Setenv("JETWAY_JOBS_MEMORY", "")
	t.Setenv("JETWAY_JOBS_PROCESSES", "")
	cfg, err := parseJobsWorkerFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.Tree != jobs.DefaultTreeLimits {
		t.Errorf("tree limits %+v, want the defaults %+v", cfg.Limits.Tree, jobs.DefaultTreeLimits)
	}
	if cfg.AllowUnconfined {
		t.Error("unconfined jobs allowed by default")
	}
	if cfg.WorkspaceSize != jobs.DefaultWorkspaceSize || cfg.WorkspaceFiles != jobs.DefaultWorkspaceFiles {
		t.Errorf("disk cap %d bytes, %d files; want the defaults", cfg.WorkspaceSize, cfg.WorkspaceFiles)
	}
	// 0 on the command line is no limit: negative in the config, since the
	// config's zero is the default.
	cfg, err = parseJobsWorkerFlags(t, "--memory", "0", "--processes", "0", "--cpu-time", "0", "--workspace-size", "0", "--workspace-files", "0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.Tree.Memory >= 0 || cfg.Limits.Tree.Processes >= 0 || cfg.Limits.Tree.CPUTime >= 0 || cfg.WorkspaceSize >= 0 || cfg.WorkspaceFiles >= 0 {
		t.Errorf("0 flags gave %+v, disk %d/%d, want every limit off (negative)", cfg.Limits.Tree, cfg.WorkspaceSize, cfg.WorkspaceFiles)
	}
}

func TestJob_env_flag_passes_named_variables_but_never_the_workers_credentials(t *testing.T) {
	t.Setenv("GOPROXY", "https://proxy.example")
	t.Setenv("NATS_PASSWORD", "secret")
	cfg, err := parseJobsWorkerFlags(t, "--job-env", "GOPROXY", "--job-env", "UNSET_ONE")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Env, " ") != "GOPROXY=https://proxy.example" {
		t.Errorf("job env %q", cfg.Env)
	}
	for _, name := range []string{"NATS_PASSWORD", "nats_url", "JETWAY_TOKEN"} {
		if _, err := parseJobsWorkerFlags(t, "--job-env", name); err == nil || !strings.Contains(err.Error(), "never passed to jobs") {
			t.Errorf("--job-env %s: %v, want a refusal", name, err)
		}
	}
}
