//! A realistic pod JSON generator for the benches (about 3 KiB, compact, as the apiserver writes a pod
//! in a watch event: kind and apiVersion first, managedFields, probes, status with conditions).
//! Deterministic: pod `i` is always the same bytes at the same resourceVersion.

#![allow(dead_code)] // each bench uses a different part

/// Namespaces pods are spread over.
pub const NAMESPACES: usize = 100;
/// Nodes pods are spread over (1000 pods per 100 nodes ≈ a kubelet's share at 100k pods).
pub const NODES: usize = 1000;

pub fn namespace_of(i: usize) -> String {
    format!("team-{:03}", i % NAMESPACES)
}

pub fn node_of(i: usize) -> String {
    format!("ip-10-{}-{}-{}.ec2.internal", (i % NODES) / 250, (i % NODES) % 250, 7)
}

/// Pod `i` at resourceVersion `rv`, with type meta.
pub fn pod_json(i: usize, rv: u64) -> String {
    let ns = namespace_of(i);
    let node = node_of(i);
    let app = format!("svc-{}", i % 373);
    let hash = format!("{:010x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24);
    let name = format!("{app}-{}-{:05x}", &hash[..8], i & 0xfffff);
    let uid =
        format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", i, i % 65536, i % 4096, (i * 7) % 4096, i * 31);
    let ip = format!("10.{}.{}.{}", 100 + (i >> 16) % 100, (i >> 8) & 255, i & 255);
    format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","generateName":"{app}-{h8}-","namespace":"{ns}","#,
            r#""uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"2026-11-20T10:{m:02}:{s:02}Z","#,
            r#""labels":{{"app":"{app}","pod-template-hash":"{h8}","tier":"backend","version":"v{v}"}},"#,
            r#""annotations":{{"kubectl.kubernetes.io/restartedAt":"2026-11-20T10:00:00Z","prometheus.io/scrape":"true"}},"#,
            r#""ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{app}-{h8}","uid":"{uid}","controller":true,"blockOwnerDeletion":true}}],"#,
            r#""managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-11-20T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}},"f:tier":{{}},"f:version":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"{uid}\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"app\"}}":{{".":{{}},"f:image":{{}},"f:imagePullPolicy":{{}},"f:name":{{}},"f:ports":{{}},"f:resources":{{}}}}}},"f:dnsPolicy":{{}},"f:restartPolicy":{{}}}}}}}}]}},"#,
            r#""spec":{{"volumes":[{{"name":"kube-api-access-{h5}","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}}],"defaultMode":420}}}}],"#,
            r#""containers":[{{"name":"app","image":"registry.example.com/{app}:1.{v}.3","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"#,
            r#""env":[{{"name":"LOG_LEVEL","value":"info"}}],"#,
            r#""resources":{{"limits":{{"cpu":"500m","memory":"512Mi"}},"requests":{{"cpu":"100m","memory":"128Mi"}}}},"#,
            r#""volumeMounts":[{{"name":"kube-api-access-{h5}","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}],"#,
            r#""livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","#,
            r#""nodeName":"{node}","securityContext":{{}},"schedulerName":"default-scheduler","#,
            r#""tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"#,
            r#""priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"#,
            r#""status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T10:00:01Z"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T10:00:05Z"}},"#,
            r#"{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T10:00:05Z"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-20T10:00:00Z"}}],"#,
            r#""hostIP":"10.0.{n1}.{n2}","hostIPs":[{{"ip":"10.0.{n1}.{n2}"}}],"podIP":"{ip}","podIPs":[{{"ip":"{ip}"}}],"startTime":"2026-11-20T10:00:01Z","#,
            r#""containerStatuses":[{{"name":"app","state":{{"running":{{"startedAt":"2026-11-20T10:00:04Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"#,
            r#""image":"registry.example.com/{app}:1.{v}.3","imageID":"registry.example.com/{app}@sha256:{h8}{h8}{h8}{h8}","#,
            r#""containerID":"containerd://{h8}{h8}{h8}{h8}{h8}{h8}{h8}{h8}","started":true}}],"qosClass":"Burstable"}}}}"#
        ),
        name = name,
        app = app,
        h8 = &hash[..8],
        h5 = &hash[..5],
        ns = ns,
        uid = uid,
        rv = rv,
        m = i % 60,
        s = (i / 60) % 60,
        v = i % 7,
        node = node,
        ip = ip,
        n1 = (i % NODES) / 250,
        n2 = (i % NODES) % 250,
    )
}

/// Pod `i` as a list item (no type meta), as the apiserver writes built-in list items.
pub fn pod_item_json(i: usize, rv: u64) -> String {
    let full = pod_json(i, rv);
    let prefix = r#"{"kind":"Pod","apiVersion":"v1","#;
    format!("{{{}", &full[prefix.len()..])
}

/// A PodList of pods `0..n` (items without type meta).
pub fn pod_list_json(n: usize, rv: u64) -> String {
    let items: Vec<String> = (0..n).map(|i| pod_item_json(i, rv - 1 - (i as u64 % 1000))).collect();
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// A watch line for pod `i`.
pub fn watch_line(kind: &str, i: usize, rv: u64) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{}}}\n", pod_json(i, rv))
}
