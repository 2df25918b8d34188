use super::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn key() -> WorkspaceKey {
    WorkspaceKey::new("ns", "ws")
}

fn waiting(reason: &str, message: &str) -> PodStatus {
    PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "workspace".into(),
            image: "registry.invalid/nope:1".into(),
            restart_count: 4,
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message: Some(message.into()) }),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("OOMKilled".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn reason(status: &PodStatus) -> Option<FailureReason> {
    from_pod(key(), status, SignedDuration::from_secs(60)).map(|f| f.failure.reason)
}

#[test]
fn the_kubelets_back_off_states_count_and_its_first_attempts_do_not() {
    assert_eq!(reason(&waiting("ImagePullBackOff", "Back-off pulling image")), Some(FailureReason::ImagePull));
    assert_eq!(reason(&waiting("ErrImagePull", "failed to resolve")), None, "not backing off yet");
    assert_eq!(reason(&waiting("ContainerCreating", "")), None);
    let crash = from_pod(key(), &waiting("CrashLoopBackOff", "back-off"), SignedDuration::ZERO).unwrap();
    assert_eq!(&*crash.failure.message, "CrashLoop: container \"workspace\" OOMKilled (exit 137), restarted 4 times");
    let config =
        from_pod(key(), &waiting("CreateContainerConfigError", "secret \"x\" not found"), SignedDuration::ZERO);
    assert!(config.unwrap().failure.message.ends_with("could not be created: secret \"x\" not found"));
}

/// A project that cannot be cloned: the cloner's Git error, kept by FallbackToLogsOnError,
/// is in the report; and a postStart hook's failing output, in both states the kubelet shows.
#[test]
fn what_a_failing_container_said_is_reported_by_its_end() {
    let mut status = waiting("CrashLoopBackOff", "back-off 10s restarting failed container");
    let container = &mut status.container_statuses.as_mut().unwrap()[0];
    container.name = "gl-project-cloner".into();
    let said = format!(
        "Cloning into '/projects/app.cloning'...\n{}fatal: remote error: \n  no such repository: /app.git",
        "x".repeat(2000)
    );
    container.last_state.as_mut().unwrap().terminated.as_mut().unwrap().message = Some(said);
    container.last_state.as_mut().unwrap().terminated.as_mut().unwrap().reason = Some("Error".into());
    container.last_state.as_mut().unwrap().terminated.as_mut().unwrap().exit_code = 128;
    status.init_container_statuses = status.container_statuses.take();
    let failure = from_pod(key(), &status, SignedDuration::ZERO).unwrap().failure;
    assert!(
        failure
            .message
            .starts_with("CrashLoop: container \"gl-project-cloner\" Error (exit 128), restarted 4 times: …"),
        "{}",
        failure.message
    );
    assert!(failure.message.ends_with("no such repository: /app.git"), "{}", failure.message);
    assert!(failure.message.len() < 1024);

    let reason = "PostStartHookError: command '/bin/sh /workspace-scripts/main/gl-run-poststart-commands.sh' exited with 1: postStart command greet failed (exit 3); its output ends:\nno space left\n";
    let failure = from_pod(key(), &waiting(reason, "Exec lifecycle hook ([/bin/sh ...]) failed"), SignedDuration::ZERO)
        .unwrap()
        .failure;
    assert_eq!(failure.reason, FailureReason::PostStartHook);
    assert_eq!(
        &*failure.message,
        "PostStartHook: container \"workspace\"'s postStart hook exited with 1: postStart command greet failed (exit 3); its output ends:\nno space left"
    );
}

#[test]
fn an_unschedulable_pod_counts_after_its_grace() {
    let since = Timestamp::from_second(1_000).unwrap();
    let status = PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/3 nodes are available: 3 Insufficient cpu.".into()),
            last_transition_time: Some(Time(since)),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let failure = from_pod(key(), &status, SignedDuration::from_secs(60)).unwrap();
    let counts_from = since.checked_add(SignedDuration::from_secs(60)).unwrap();
    assert_eq!(failure.counts_from, Some(counts_from));
    let mut pods = PodFailures::default();
    assert_eq!(pods.set("ns/ws-1".into(), Some(failure)), Some(key()));
    assert_eq!(pods.counting(since).get(&key()).copied(), None, "within the grace");
    assert_eq!(pods.counting(counts_from).get(&key()).map(|f| f.reason), Some(FailureReason::Unschedulable));
    assert_eq!(pods.counting_since(since, counts_from), [key()], "the cycle after the grace looks again");
    assert!(pods.counting_since(counts_from, counts_from).is_empty(), "and only that one");
    assert_eq!(pods.set("ns/ws-1".into(), None), Some(key()), "scheduled: gone");
    assert!(pods.counting(counts_from).is_empty());
}

#[test]
fn a_workspace_with_several_failing_pods_shows_the_first_by_name() {
    let failing =
        |reason| PodFailure { workspace: key(), failure: WorkloadFailure::new(reason, "x"), counts_from: None };
    let mut pods = PodFailures::default();
    pods.set("ns/ws-b".into(), Some(failing(FailureReason::CrashLoop)));
    pods.set("ns/ws-a".into(), Some(failing(FailureReason::ImagePull)));
    let now = Timestamp::from_second(1).unwrap();
    assert_eq!(pods.counting(now).get(&key()).map(|f| f.reason), Some(FailureReason::ImagePull));
}

#[test]
fn a_pod_belongs_to_the_deployment_its_replica_set_is_named_after() {
    let owner = |kind: &str, name: &str| OwnerReference {
        kind: kind.into(),
        name: name.into(),
        controller: Some(true),
        ..Default::default()
    };
    let labels = BTreeMap::from([("pod-template-hash".to_string(), "5c9d7f".to_string())]);
    assert_eq!(owning_deployment(&[owner("ReplicaSet", "my-ws-5c9d7f")], &labels).as_deref(), Some("my-ws"));
    assert_eq!(owning_deployment(&[owner("ReplicaSet", "other-abc")], &labels), None);
    assert_eq!(owning_deployment(&[owner("StatefulSet", "my-ws-5c9d7f")], &labels), None);
    assert_eq!(owning_deployment(&[owner("ReplicaSet", "my-ws-5c9d7f")], &BTreeMap::new()), None);
}
