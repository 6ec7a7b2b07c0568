// Package tasks runs work in the background for an agent session: start a
// command (or a function: a watch loop, a hook, later a sub-agent) and get an
// id at once, read its output while it runs, wait for it with a timeout, kill
// it. Output goes line by line (cleaned by the caller, e.g. decoded and
// redacted) to a file the host names per session. A finished task leaves a
// notice the host hands to the model before its next request (TakeNotices),
// unless the model already saw the end through Wait or Kill; a running
// function task may leave notices too (Reporter.Notify). A host that took
// notices for a turn the model never got them in hands them back with
// ReturnNotices. The whole process tree of every command task is killed by
// Kill, by the limits and by Close (see package proctree for how trees are
// contained); a function task's context is cancelled. Nothing outlives the
// manager.
//
// Task ids count per session from 1. Hooks for a service wrapping the
// manager: SetOnEnd and SetOnOverdue (Spec.Expected) for exit and overdue
// events, OnNotice, RunTasks for a recovering runner (Spec.RunID), and
// Restore/MarkLost for a restarted worker's unfinished tasks.

package tasks
