package jobs

// diskNote is the task's end note naming the workspace's disk cap when the
// command ended with the workspace full (nil while no cap is set).
func (w *Worker) diskNote(dir string) func(int, string) string { return nil }
