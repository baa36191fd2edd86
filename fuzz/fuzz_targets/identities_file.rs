//! The identities file: parsing, checking the grants, and the policy's decisions over
//! what it built. Nothing may panic; whatever parses either builds or names what is
//! wrong, and a public grant never allows more than reading and listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talon_protocols::access::identities_file::IdentitiesFile;
use talon_protocols::access::{Access, Action, AnonymousAccess, Need, Open, Resource};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = IdentitiesFile::parse(text) else {
        return;
    };
    let Ok(built) = file.build("devstoreaccount1") else {
        return;
    };
    let names = ["", "*", "b", "data", "train/", "train/x"];
    let open = Open {
        public: &built.s3.public,
        acls: None,
    };
    let granted = |grants| Access::Granted { grants, open };
    let mut accesses: Vec<Access<'_>> = built.s3.grants.values().map(granted).collect();
    accesses.push(granted(&built.azure.grants));
    accesses.push(granted(&built.azure.sas_grants));
    accesses.push(Access::Anonymous {
        level: AnonymousAccess::Refused,
        open,
    });
    for access in accesses {
        for action in Action::ALL {
            for bucket in names {
                for key in names {
                    for resource in [
                        Resource::Service,
                        Resource::Bucket(bucket),
                        Resource::InBucket(bucket),
                        Resource::Listing {
                            bucket,
                            prefix: key,
                        },
                        Resource::Object { bucket, key },
                    ] {
                        let need = Need { action, resource };
                        let allowed = access.allows(need);
                        assert_eq!(access.check(need).is_ok(), allowed);
                        if matches!(access, Access::Anonymous { .. })
                            && matches!(action, Action::Write | Action::Delete | Action::Admin)
                        {
                            assert!(!allowed, "a public grant allowed {action}");
                        }
                    }
                }
            }
        }
    }
});
