DELETE FROM pjob WHERE status = 'completed';
