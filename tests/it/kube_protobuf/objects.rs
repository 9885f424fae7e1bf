//! One object of every built-in kind the cluster does not hold yet, for `kube_protobuf`.

use serde_json::{Value, json};

use super::NS;

/// A CSR for `CN=kache-kinds` (an EC key made for this test; nothing signs it).
const CSR_PEM_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIaU1JR0lBZ0VBTUNZeEZEQVNCZ05WQkFNTUMydGhZMmhsTFd0cGJtUnpNUTR3REFZRFZRUUtEQVZyWVdObwpaVEJaTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEEwSUFCSm1WYllhQjZxc2pEY3E0YnkzV0lYQy9zakIrCmhvbzFUWExBeXRhNnc2bmx5MzV6ZDBNL1pLMnZXUzdudllZMXFtVTI0TTFYc2JUT2tTb3hoTFI5UnRhZ0FEQUsKQmdncWhrak9QUVFEQWdOSkFEQkdBaUVBODNtbTg0YUpmNS96aEZmdlh6bjZkMDBISjJRb2ZveERyVFJxU2NGNgpuWElDSVFEb2luTEFtOElabEF1S2ZEMVFEYzJjZkNHWld3M0laa295MFBjNWhsNkpoZz09Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";

/// (collection path, object): none of them starts a pod or calls out — workloads at zero replicas or
/// suspended, a DaemonSet for nodes that do not exist, webhooks and policies whose match conditions are
/// false, a CSR for a signer nobody runs.
pub(super) fn all() -> Vec<(String, Value)> {
    let ns = |p: &str| format!("/api/v1/namespaces/{NS}/{p}");
    let nsg = |gv: &str, p: &str| format!("/apis/{gv}/namespaces/{NS}/{p}");
    let cl = |gv: &str, p: &str| format!("/apis/{gv}/{p}");
    let meta = |name: &str| json!({"name": name, "labels": {"app": "kinds"}, "annotations": {"kache.dev/kind": "test"}});
    let pod_spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
        "ports": [{"containerPort": 8080, "name": "http"}], "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}}}],
        "nodeSelector": {"kache-testbed/none": "true"}});
    let template = json!({"metadata": {"labels": {"app": "kinds"}}, "spec": pod_spec});
    let selector = json!({"matchLabels": {"app": "kinds"}});
    let never = json!([{"name": "never", "expression": "false"}]);
    let rules = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]);
    let webhook = |reinvoke: bool| {
        let mut w = json!({"name": "kinds.kache.dev", "clientConfig": {"service": {"namespace": NS, "name": "kinds", "path": "/hook", "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "Namespaced"}],
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 1,
            "objectSelector": {"matchLabels": {"kache-testbed/never": "true"}}, "matchConditions": never});
        if reinvoke {
            w["reinvocationPolicy"] = json!("Never");
        }
        w
    };
    let devices = json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "kache-kinds", "allocationMode": "ExactCount", "count": 1}}]});
    vec![
        (ns("podtemplates"), json!({"metadata": meta("kinds"), "template": template})),
        (
            ns("replicationcontrollers"),
            json!({"metadata": meta("kinds"), "spec": {"replicas": 0, "selector": {"app": "kinds"}, "template": template}}),
        ),
        (
            ns("limitranges"),
            json!({"metadata": meta("kinds"), "spec": {"limits": [{"type": "Container", "default": {"cpu": "200m", "memory": "128Mi"},
            "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "2"}, "maxLimitRequestRatio": {"cpu": "4"}}]}}),
        ),
        (
            ns("resourcequotas"),
            json!({"metadata": meta("kinds"), "spec": {"hard": {"pods": "10", "requests.cpu": "4", "count/configmaps": "50"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["kinds"]}]}}}),
        ),
        (
            ns("services"),
            json!({"metadata": meta("kinds"), "spec": {"selector": {"app": "kinds"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
        ),
        (
            ns("persistentvolumeclaims"),
            json!({"metadata": meta("kinds"), "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "kache-kinds-none", "volumeMode": "Filesystem"}}),
        ),
        (
            "/api/v1/persistentvolumes".into(),
            json!({"metadata": meta("kache-kinds"), "spec": {"capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/kache-kinds", "type": "DirectoryOrCreate"},
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "kache-kinds-none", "mountOptions": ["ro"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-0"]}]}]}}}}),
        ),
        (
            nsg("apps/v1", "statefulsets"),
            json!({"metadata": meta("kinds"), "spec": {"replicas": 0, "serviceName": "kinds", "selector": selector, "template": template,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}, "ordinals": {"start": 1}}}),
        ),
        (
            nsg("apps/v1", "daemonsets"),
            json!({"metadata": meta("kinds"), "spec": {"selector": selector, "template": template,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}}}),
        ),
        (
            nsg("batch/v1", "jobs"),
            json!({"metadata": meta("kinds"), "spec": {"suspend": true, "parallelism": 2, "completions": 4, "backoffLimit": 1,
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]},
            "template": {"metadata": {"labels": {"app": "kinds"}}, "spec": {"restartPolicy": "Never", "containers": pod_spec["containers"]}}}}),
        ),
        (
            nsg("batch/v1", "cronjobs"),
            json!({"metadata": meta("kinds"), "spec": {"schedule": "0 0 1 1 *", "suspend": true, "timeZone": "Etc/UTC",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": pod_spec["containers"]}}}}}}),
        ),
        (
            nsg("autoscaling/v2", "horizontalpodautoscalers"),
            json!({"metadata": meta("kinds"), "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kache-kinds-missing"}, "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "100m"}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}}}}),
        ),
        (
            cl("networking.k8s.io/v1", "ingressclasses"),
            json!({"metadata": meta("kache-kinds"), "spec": {"controller": "kache.dev/kinds",
            "parameters": {"apiGroup": "kache.dev", "kind": "Parameters", "name": "p", "scope": "Namespace", "namespace": NS}}}),
        ),
        (
            nsg("networking.k8s.io/v1", "ingresses"),
            json!({"metadata": meta("kinds"), "spec": {"ingressClassName": "kache-kinds",
            "rules": [{"host": "kinds.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "kinds", "port": {"number": 80}}}}]}}],
            "tls": [{"hosts": ["kinds.example.com"], "secretName": "kinds-tls"}]}}),
        ),
        (
            nsg("networking.k8s.io/v1", "networkpolicies"),
            json!({"metadata": meta("kinds"), "spec": {"podSelector": selector, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"namespaceSelector": {}}],
                "ports": [{"protocol": "TCP", "port": 8000, "endPort": 8080}, {"port": "http"}]}], "egress": [{}]}}),
        ),
        (
            cl("node.k8s.io/v1", "runtimeclasses"),
            json!({"metadata": meta("kache-kinds"), "handler": "kinds", "overhead": {"podFixed": {"cpu": "10m", "memory": "16Mi"}},
            "scheduling": {"nodeSelector": {"kache-testbed/none": "true"}, "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}}),
        ),
        (
            cl("scheduling.k8s.io/v1", "priorityclasses"),
            json!({"metadata": meta("kache-kinds"), "value": 1000, "description": "kinds", "preemptionPolicy": "Never"}),
        ),
        (
            cl("storage.k8s.io/v1", "storageclasses"),
            json!({"metadata": meta("kache-kinds"), "provisioner": "kache.dev/kinds", "parameters": {"type": "fast"},
            "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true, "mountOptions": ["debug"],
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["zone-0"]}]}]}),
        ),
        (
            cl("storage.k8s.io/v1", "csidrivers"),
            json!({"metadata": meta("kinds.kache.dev"), "spec": {"attachRequired": false, "podInfoOnMount": true,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"], "fsGroupPolicy": "File", "tokenRequests": [{"audience": "kinds", "expirationSeconds": 3600}],
            "requiresRepublish": false, "seLinuxMount": true}}),
        ),
        (
            cl("storage.k8s.io/v1", "csinodes"),
            json!({"metadata": meta("kache-kinds"), "spec": {"drivers": [{"name": "kinds.kache.dev", "nodeID": "n1",
            "topologyKeys": ["topology.kubernetes.io/zone"], "allocatable": {"count": 10}}]}}),
        ),
        (
            nsg("storage.k8s.io/v1", "csistoragecapacities"),
            json!({"metadata": meta("kinds"), "storageClassName": "kache-kinds",
            "capacity": "10Gi", "maximumVolumeSize": "1Gi", "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": "zone-0"}}}),
        ),
        (
            cl("storage.k8s.io/v1", "volumeattachments"),
            json!({"metadata": meta("kache-kinds"), "spec": {"attacher": "kinds.kache.dev", "nodeName": "kwok-node-0",
            "source": {"persistentVolumeName": "kache-kinds"}}}),
        ),
        (
            cl("storage.k8s.io/v1", "volumeattributesclasses"),
            json!({"metadata": meta("kache-kinds"), "driverName": "kinds.kache.dev", "parameters": {"iops": "3000"}}),
        ),
        (
            cl("certificates.k8s.io/v1", "certificatesigningrequests"),
            json!({"metadata": meta("kache-kinds"), "spec": {"request": CSR_PEM_BASE64,
            "signerName": "kache.dev/kinds", "usages": ["digital signature", "client auth"], "expirationSeconds": 3600}}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
            json!({"metadata": meta("kache-kinds"), "webhooks": [webhook(false)]}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
            json!({"metadata": meta("kache-kinds"), "webhooks": [webhook(true)]}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"),
            json!({"metadata": meta("kache-kinds"), "spec": {"failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": rules}, "matchConditions": never, "variables": [{"name": "v", "expression": "1"}],
            "validations": [{"expression": "true", "message": "m", "reason": "Invalid"}], "auditAnnotations": [{"key": "k", "valueExpression": "'v'"}]}}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"),
            json!({"metadata": meta("kache-kinds"), "spec": {"policyName": "kache-kinds",
            "validationActions": ["Audit"], "matchResources": {"namespaceSelector": {"matchLabels": {"kache-testbed/never": "true"}}}}}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "mutatingadmissionpolicies"),
            json!({"metadata": meta("kache-kinds"), "spec": {"failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": rules}, "matchConditions": never, "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}}]}}),
        ),
        (
            cl("admissionregistration.k8s.io/v1", "mutatingadmissionpolicybindings"),
            json!({"metadata": meta("kache-kinds"), "spec": {"policyName": "kache-kinds",
            "matchResources": {"namespaceSelector": {"matchLabels": {"kache-testbed/never": "true"}}}}}),
        ),
        (
            cl("resource.k8s.io/v1", "deviceclasses"),
            json!({"metadata": meta("kache-kinds"), "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'kinds.kache.dev'"}}],
            "config": [{"opaque": {"driver": "kinds.kache.dev", "parameters": {"mode": "shared", "slices": 3, "ratio": 0.5, "tags": ["a", "b"]}}}]}}),
        ),
        (
            nsg("resource.k8s.io/v1", "resourceclaims"),
            json!({"metadata": meta("kinds"), "spec": {"devices": devices}}),
        ),
        (
            nsg("resource.k8s.io/v1", "resourceclaimtemplates"),
            json!({"metadata": meta("kinds"), "spec": {"spec": {"devices": devices}}}),
        ),
        (
            cl("resource.k8s.io/v1", "resourceslices"),
            json!({"metadata": meta("kache-kinds"), "spec": {"driver": "kinds.kache.dev",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "kwok-node-0",
            "devices": [{"name": "d0", "attributes": {"model": {"string": "x"}, "cores": {"int": 8}, "fast": {"bool": true}, "driverVersion": {"version": "1.2.3"}},
                "capacity": {"memory": {"value": "16Gi"}}}]}}),
        ),
        (cl("apiextensions.k8s.io/v1", "customresourcedefinitions"), crd(meta("widgets.kinds.kache.dev"))),
    ]
}

/// A CustomResourceDefinition whose schema has every form of JSONSchemaProps' own JSON types the
/// apiserver's validation lets through: `JSON` values (`default`, `example`, `enum`: objects, arrays,
/// numbers, strings, keys out of order), `additionalProperties` as `true`, `false` and a schema, `items` as
/// a schema, `x-kubernetes-preserve-unknown-fields`. (`items` as an array, `additionalItems` and
/// `dependencies` are refused by the apiserver: [`refused_crd`].) Its only version is not served, so no
/// custom resource joins discovery.
pub(super) fn crd(meta: Value) -> Value {
    let spec = json!({"type": "object", "default": {"replicas": 1, "mode": "fast", "list": ["b", "a"]},
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10, "default": 1, "example": 3},
            "ratio": {"type": "number", "multipleOf": 0.25, "default": 0.25, "example": 1.5e3},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast", "example": "a \"quoted\" é"},
            "level": {"type": "integer", "enum": [1, 2, 30]},
            "choice": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "enum": [{"b": [true, null], "a": 1}, {}], "example": {"z": {"y": []}, "a": -2.5}},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": "x", "maxLength": 63}},
            "free": {"type": "object", "additionalProperties": true},
            "closed": {"type": "object", "additionalProperties": false},
            "list": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["a"], "maxItems": 4,
                "x-kubernetes-list-type": "set"},
            "raw": {"x-kubernetes-preserve-unknown-fields": true, "default": {"any": [1, "two", {"three": 3}]}},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}], "default": 8080},
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "rules": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "on": {"type": "boolean", "default": false}}},
                "x-kubernetes-validations": [{"rule": "self.size() < 10", "message": "too many", "reason": "FieldValueInvalid"}]}}});
    let schema = json!({"openAPIV3Schema": {"type": "object", "description": "kinds: <every> form & \"more\"",
        "properties": {"spec": spec, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}});
    json!({"metadata": meta, "spec": {"group": "kinds.kache.dev", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wdg"], "categories": ["kinds"]},
        "versions": [{"name": "v1", "served": false, "storage": true, "schema": schema,
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
            "additionalPrinterColumns": [{"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "priority": 1}]}]}})
}

/// A CRD with the union forms the apiserver refuses (`items` as an array of schemas, `additionalItems`,
/// `dependencies` with property names and with a schema): kube-proto covers them (`protobuf_codec`).
pub(super) fn refused_crd() -> Value {
    let mut crd = crd(json!({"name": "refused.kinds.kache.dev"}));
    crd["spec"]["names"] = json!({"plural": "refused", "kind": "Refused"});
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["tuple"] =
        json!({"type": "array", "items": [{"type": "string"}], "additionalItems": false});
    spec["dependencies"] = json!({"replicas": ["mode"], "mode": {"required": ["replicas"]}});
    crd
}
