package obs

// The metrics that more than one service counts: the scheduler counts what it applies,
// a runner with --apply-ends what its finish scripts apply themselves. A query sums
// them over the services.
const (
	MetricJobEnds     = "hero_job_ends_total"
	MetricJobEndsHelp = "Job ends applied to their flows or standalone jobs, by outcome (completed, failed, retry, duplicate, cancelled: a job that never ran because its flow was cancelled or a job it depends on failed); the scheduler's and, for the successful runs they apply themselves, the runners'."

	MetricJobsDispatched     = "hero_jobs_dispatched_total"
	MetricJobsDispatchedHelp = "Job runs dispatched (first attempts and retries): by the scheduler, and by the runners for the dependents that the ends they apply make ready."

	MetricFlowsEnded     = "hero_flows_ended_total"
	MetricFlowsEndedHelp = "Flows that ended, by final status (finished or error): by the scheduler, or by the runner whose job's end ended the flow."
)
