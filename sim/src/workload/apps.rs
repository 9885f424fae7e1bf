//! The Deployments and ReplicaSets that own the workload's pods, so that `kubectl get deploy,rs,pods`
//! looks like a cluster: every app of a namespace is a Deployment (selector `app`), each of its template
//! generations a ReplicaSet (selector `app` + `pod-template-hash`, revision annotation, controller
//! ownerReference to the Deployment), and each pod names its ReplicaSet's uid as its controller.
//!
//! The sim runs no controllers: replica counts are what seeding created (`SimHandle::seed_cluster`), and
//! churn's pods join their ReplicaSet without changing its counts.

use serde_json::{Value, json};

pub use super::objects::GENERATIONS;
use super::objects::{APPS, IMAGES, template_hash};

/// The apps every namespace runs, one Deployment each.
pub const APPS_IN_ORDER: &[&str] = APPS;

/// The ReplicaSet name of an app's generation: `<app>-<pod-template-hash>`, the prefix of its pods' names.
pub fn replica_set_name(app: &str, generation: u8) -> String {
    format!("{app}-{}", template_hash(app, generation))
}

fn image(app: &str) -> &'static str {
    APPS.iter().position(|a| *a == app).map_or(IMAGES[0], |i| IMAGES[i])
}

/// The pod template of an app (with `pod-template-hash` for a ReplicaSet's copy).
fn template(app: &str, hash: Option<&str>) -> Value {
    let mut labels = json!({"app": app});
    if let Some(h) = hash {
        labels["pod-template-hash"] = json!(h);
    }
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "containers": [{"name": app, "image": image(app), "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "securityContext": {}, "schedulerName": "default-scheduler"
        }
    })
}

/// Replica counts of one ReplicaSet or Deployment: pods that exist, and those Ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub pods: usize,
    pub ready: usize,
}

/// A Deployment of `app` whose newest generation has `updated` of its `total` pods (the others belong to
/// older generations: a rollout in progress, as the workload spreads pods over generations).
pub fn deployment(namespace: &str, app: &str, total: Replicas, updated: Replicas) -> Value {
    let mut status = json!({"observedGeneration": 1});
    if total.pods > 0 {
        status["replicas"] = json!(total.pods);
        status["updatedReplicas"] = json!(updated.pods);
        status["readyReplicas"] = json!(total.ready);
        status["availableReplicas"] = json!(total.ready);
    }
    status["conditions"] = json!([
        {"type": "Available", "status": if total.ready == total.pods { "True" } else { "False" },
         "lastUpdateTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z",
         "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
        {"type": "Progressing", "status": "True",
         "lastUpdateTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z",
         "reason": "NewReplicaSetAvailable",
         "message": format!("ReplicaSet \"{}\" has successfully progressed.",
                            replica_set_name(app, GENERATIONS - 1))}
    ]);
    json!({
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {"name": app, "namespace": namespace, "labels": {"app": app},
                     "annotations": {"deployment.kubernetes.io/revision": GENERATIONS.to_string()}},
        "spec": {
            "replicas": total.pods,
            "selector": {"matchLabels": {"app": app}},
            "template": template(app, None),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600
        },
        "status": status
    })
}

/// The ReplicaSet of an app's `generation`, controlled by the Deployment whose uid is `deployment_uid`.
pub fn replica_set(namespace: &str, app: &str, generation: u8, deployment_uid: &str, n: Replicas) -> Value {
    let hash = template_hash(app, generation);
    let mut status = json!({"replicas": n.pods});
    if n.pods > 0 {
        status["fullyLabeledReplicas"] = json!(n.pods);
        status["readyReplicas"] = json!(n.ready);
        status["availableReplicas"] = json!(n.ready);
    }
    status["observedGeneration"] = json!(1);
    json!({
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": replica_set_name(app, generation),
            "namespace": namespace,
            "labels": {"app": app, "pod-template-hash": hash},
            "annotations": {"deployment.kubernetes.io/desired-replicas": n.pods.to_string(),
                            "deployment.kubernetes.io/max-replicas": n.pods.to_string(),
                            "deployment.kubernetes.io/revision": (generation + 1).to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                                 "uid": deployment_uid, "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "replicas": n.pods,
            "selector": {"matchLabels": {"app": app, "pod-template-hash": hash}},
            "template": template(app, Some(&hash))
        },
        "status": status
    })
}

/// The ReplicaSet name a workload pod belongs to (its `generateName` without the dash).
pub fn owner_name(pod: &Value) -> Option<&str> {
    pod["metadata"]["ownerReferences"][0]["name"].as_str()
}

/// Makes `pod`'s controller reference (and the managedFields entry keyed by it) name the ReplicaSet uid
/// `uid`: the apiserver assigns uids on create, so a pod learns its owner's only once that exists.
pub fn set_owner(pod: &mut Value, uid: &str) {
    let meta = &mut pod["metadata"];
    let old = meta["ownerReferences"][0]["uid"].as_str().map(str::to_string);
    meta["ownerReferences"][0]["uid"] = json!(uid);
    let refs = meta["managedFields"][0]["fieldsV1"]["f:metadata"]["f:ownerReferences"].as_object_mut();
    if let (Some(old), Some(refs)) = (old, refs)
        && let Some(v) = refs.shift_remove(&format!("k:{{\"uid\":\"{old}\"}}"))
    {
        refs.insert(format!("k:{{\"uid\":\"{uid}\"}}"), v);
    }
}

#[cfg(test)]
mod tests;
